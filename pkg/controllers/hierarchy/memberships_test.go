package hierarchy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

func TestMembershipNamesAreValidAndDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, user := range []string{"alice", "dana@example.com", "Dana@Example.com", "https://login.example.com#1234", "---", strings.Repeat("a", 300)} {
		name := MembershipName(user)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("%q → %q: %v", user, name, errs)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%q and %q both → %q", user, other, name)
		}
		seen[name] = user
	}
	if got := MembershipName("alice"); got != "alice" {
		t.Errorf("a valid name is kept: %q", got)
	}
}

func TestMembershipBindingNames(t *testing.T) {
	platform := membershipBindingName("bob", resourcemanagerv1alpha1.RoleReference{Name: "viewer", Namespace: "milo-system"})
	org := membershipBindingName("bob", resourcemanagerv1alpha1.RoleReference{Name: "viewer", Namespace: "organization-acme"})
	if platform != "bob.viewer" || org != "bob.org.viewer" {
		t.Fatalf("names %q %q", platform, org)
	}
	long := membershipBindingName(strings.Repeat("m", 250), resourcemanagerv1alpha1.RoleReference{Name: "viewer", Namespace: "milo-system"})
	if errs := validation.IsDNS1123Subdomain(long); len(errs) > 0 {
		t.Fatalf("long name %q: %v", long, errs)
	}
}
