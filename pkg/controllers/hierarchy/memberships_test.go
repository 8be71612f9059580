package hierarchy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

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
