package tenantstorage

import (
	"strings"
	"testing"

	"go.miloapis.com/milo/pkg/tenancy"
)

// No key of one tenant lies under another tenant's prefix, and a key rewritten
// for a tenant keeps the registry's key after the tenant's segment.
func FuzzKeysOfTwoTenantsNeverOverlap(f *testing.F) {
	f.Add("web", "0b5f", "webx", "1c6a", "default", "config")
	f.Add("a", "x", "a", "x/y", "ns", "n")
	f.Add("web", "", "api", "u", "", "cm")
	f.Fuzz(func(t *testing.T, nameA, uidA, nameB, uidB, namespace, name string) {
		s := &store{prefix: "/configmaps"}
		segments := []string{tenancy.PlatformSegment, tenancy.UnresolvedSegment}
		for _, id := range []string{tenancy.ProjectID(uidA), tenancy.ProjectID(uidB), nameA, nameB} {
			if tenancy.ValidProjectID(id) {
				segments = append(segments, id)
			}
		}
		registryKey := "/configmaps/" + namespace + "/" + name
		for _, a := range segments {
			keyA, err := s.withSegment(registryKey, a)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimPrefix(keyA, "/configmaps/"+a); got != registryKey[len("/configmaps"):] {
				t.Fatalf("key %q of %q does not end in the registry's key", keyA, a)
			}
			for _, b := range segments {
				if a == b {
					continue
				}
				if prefixB := "/configmaps/" + b + "/"; strings.HasPrefix(keyA, prefixB) {
					t.Fatalf("key %q of tenant %q lies under tenant %q's prefix", keyA, a, b)
				}
			}
		}
		if _, err := s.withSegment("/secrets/x", "web"); err == nil {
			t.Fatal("a key outside the resource prefix was rewritten")
		}
	})
}
