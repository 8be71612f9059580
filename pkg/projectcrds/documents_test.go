package projectcrds

import (
	"fmt"
	"testing"
)

func TestDocumentCacheIsBoundedInBytes(t *testing.T) {
	// Each entry costs its document, its one-byte key and entryOverhead.
	doc := func(n int) int { return n - 1 - entryOverhead }
	c := newDocumentCache(1000)
	c.add("a", "A", doc(200))
	c.add("b", "B", doc(200))
	c.add("c", "C", doc(200))
	if _, ok := c.get("a"); !ok { // a is now the most recently read
		t.Fatal("a document under the bound was not kept")
	}
	c.add("d", "D", doc(250))
	c.add("e", "E", doc(250)) // 1,100 bytes: the least recently read, b, goes
	if _, ok := c.get("b"); ok {
		t.Error("the least recently read document was kept past the bound")
	}
	for _, k := range []string{"a", "c", "d", "e"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("document %s was dropped, though the bound holds it", k)
		}
	}
	c.add("f", "F", doc(251))
	if _, ok := c.get("f"); ok {
		t.Error("a document of more than a quarter of the bound was kept")
	}
	if c.size > c.max {
		t.Errorf("the cache holds %d bytes, past its bound of %d", c.size, c.max)
	}
	// Empty documents (a project's CRDs serving no version) count too.
	empty := newDocumentCache(1000)
	for i := range 100 {
		empty.add(fmt.Sprintf("k%d", i), nil, 0)
	}
	if n := len(empty.entries); n > 1000/entryOverhead {
		t.Errorf("%d empty documents kept under a bound of 1,000 bytes", n)
	}
}
