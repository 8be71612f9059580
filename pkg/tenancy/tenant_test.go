package tenancy

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParsePath(t *testing.T) {
	cases := []struct {
		path    string
		tenant  Tenant
		org     string
		rest    string
		matched bool
	}{
		{"/api/v1/namespaces", PlatformTenant, "", "/api/v1/namespaces", false},
		{"/apis/resourcemanager.miloapis.com/v1alpha1/projects", PlatformTenant, "", "/apis/resourcemanager.miloapis.com/v1alpha1/projects", false},
		{"/apis/resourcemanager.miloapis.com/v1alpha1/projects/web", PlatformTenant, "", "/apis/resourcemanager.miloapis.com/v1alpha1/projects/web", false},
		{"/apis/resourcemanager.miloapis.com/v1alpha1/projects/web/status", PlatformTenant, "", "/apis/resourcemanager.miloapis.com/v1alpha1/projects/web/status", false},
		{"/apis/resourcemanager.miloapis.com/v1alpha1/projects/web/control-planes", PlatformTenant, "", "/apis/resourcemanager.miloapis.com/v1alpha1/projects/web/control-planes", false},
		{"/apis/resourcemanager.miloapis.com/v1alpha1/projects/web/control-plane", ProjectTenant("web"), "", "/", true},
		{"/apis/resourcemanager.miloapis.com/v1alpha1/projects/web/control-plane/api/v1/configmaps", ProjectTenant("web"), "", "/api/v1/configmaps", true},
		{"/apis/resourcemanager.miloapis.com/v1alpha1/projects/*/control-plane/api/v1/configmaps", AllProjectsTenant, "", "/api/v1/configmaps", true},
		{"/apis/resourcemanager.miloapis.com/v1alpha1/organizations/acme/control-plane/apis", OrganizationTenant("acme"), "acme", "/apis", true},
	}
	for _, c := range cases {
		got := parsePath(c.path)
		if got.tenant != c.tenant || got.org != c.org || got.rest != c.rest || got.matched != c.matched {
			t.Errorf("parsePath(%q) = %+v, want tenant %v org %q rest %q matched %v", c.path, got, c.tenant, c.org, c.rest, c.matched)
		}
	}
}

func TestPlatformSegmentIsNeverAProjectName(t *testing.T) {
	if ValidProjectName(PlatformSegment) {
		t.Fatalf("%q is a valid project name, so a project could share the platform's keys", PlatformSegment)
	}
	if ProjectTenant("web").KeySegment() != "web" || PlatformTenant.KeySegment() != PlatformSegment {
		t.Fatal("key segments")
	}
}

func TestPlatformOnly(t *testing.T) {
	for gr, want := range map[[2]string]bool{
		{"", "configmaps"}:                                    false,
		{"rbac.authorization.k8s.io", "roles"}:                false,
		{"iam.miloapis.com", "serviceaccounts"}:               false,
		{"iam.miloapis.com", "policybindings"}:                true,
		{"resourcemanager.miloapis.com", "projects"}:          true,
		{"apiextensions.k8s.io", "customresourcedefinitions"}: true,
		{"authentication.k8s.io", "tokenreviews"}:             true,
		{"authentication.k8s.io", "selfsubjectreviews"}:       false,
		{"example.com", "widgets"}:                            false,
	} {
		if got := PlatformOnly(groupResource(gr)); got != want {
			t.Errorf("PlatformOnly(%v) = %v, want %v", gr, got, want)
		}
	}
}

func groupResource(gr [2]string) schema.GroupResource {
	return schema.GroupResource{Group: gr[0], Resource: gr[1]}
}
