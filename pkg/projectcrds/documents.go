package projectcrds

import (
	"container/list"
	"sync"
)

// documentCache keeps the OpenAPI documents of projects' own kinds by what
// they are made of (the classes of their CRDs and, for v3, the group
// version), never by project: every project that defines the same CRDs
// reads one document, and one project's change makes a new key without
// rebuilding anybody's. A document of a class is the same in every project:
// upstream's builder reads a CRD's spec, which its class hashes (with the
// accepted names).
//
// It is bounded in bytes, not entries, the least recently read going
// first: a project's CRDs may hold schemas of a megabyte each. A tenant that
// asks for more distinct documents than fit pays for building them (its
// requests are charged to its own CPU budget, fairness.md); others' are then
// built again once. Before it, every request built its document.
type documentCache struct {
	mu      sync.Mutex
	max     int
	size    int
	order   *list.List // of *cachedDocument, most recently read first
	entries map[string]*list.Element
}

type cachedDocument struct {
	key   string
	value any
	size  int
}

// entryOverhead is about what an entry costs beside its document and key
// (its list element, map slot and record), so that empty documents count too.
const entryOverhead = 128

// documentCacheBytes bounds what the server keeps of projects' OpenAPI documents.
const documentCacheBytes = 64 << 20

// documents is the server's cache of projects' OpenAPI documents. It is
// shared by every server of a process (tests start several): its keys are
// hashes of content, which every server builds alike.
var documents = newDocumentCache(documentCacheBytes)

func newDocumentCache(max int) *documentCache {
	return &documentCache{max: max, order: list.New(), entries: map[string]*list.Element{}}
}

// get returns the document kept under key.
func (c *documentCache) get(key string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cachedDocument).value, true
}

// add keeps value, of size bytes, under key, forgetting the least recently
// read documents past the bound. A document of more than a quarter of the
// bound is not kept: it would push out most others.
func (c *documentCache) add(key string, value any, size int) {
	size += len(key) + entryOverhead
	if size > c.max/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		c.size -= e.Value.(*cachedDocument).size
		c.order.Remove(e)
	}
	c.entries[key] = c.order.PushFront(&cachedDocument{key: key, value: value, size: size})
	c.size += size
	for c.size > c.max {
		oldest := c.order.Back()
		d := oldest.Value.(*cachedDocument)
		c.order.Remove(oldest)
		delete(c.entries, d.key)
		c.size -= d.size
	}
}
