package evaluator

import (
	"strings"
	"testing"
)

// Whatever ParsePermission accepts prints back to the same permission, and
// never has an empty part.
func FuzzParsePermission(f *testing.F) {
	for _, seed := range []string{"core/configmaps.get", "resourcemanager.miloapis.com/projects/status.update", "*/*.*", "a/b.c.d", "/x.y", "x/.y", "x/y.", "core/a/b/c.*"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := ParsePermission(s)
		if !ok {
			return
		}
		if p.Resource == "" || p.Verb == "" || strings.Contains(p.Verb, ".") {
			t.Fatalf("%q parsed to %+v", s, p)
		}
		again, ok := ParsePermission(p.String())
		if !ok || again != p {
			t.Fatalf("%q → %+v → %q → %+v", s, p, p.String(), again)
		}
	})
}
