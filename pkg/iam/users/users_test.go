package users

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestObjectNamesAreValidAndDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, user := range []string{"alice", "dana@example.com", "Dana@Example.com", "https://login.example.com#1234", "---", strings.Repeat("a", 300)} {
		name := ObjectName(user)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("%q → %q: %v", user, name, errs)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%q and %q both → %q", user, other, name)
		}
		seen[name] = user
	}
	if got := ObjectName("alice"); got != "alice" {
		t.Errorf("a valid name is kept: %q", got)
	}
}
