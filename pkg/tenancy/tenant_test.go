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
	if PlatformTenant.KeySegment() != PlatformSegment {
		t.Fatal("the platform's key segment")
	}
}

// A project's key segment is its storage id, never its name: a project that
// has not been resolved has a segment nothing is stored under, and no id made
// from a UID can equal a project name (the ids of projects stored before ids).
func TestProjectKeySegments(t *testing.T) {
	if got := ProjectTenant("web").KeySegment(); got != UnresolvedSegment {
		t.Fatalf("an unresolved project's segment is %q", got)
	}
	id := ProjectID("0b5f8a8e-1111-2222-3333-444455556666")
	if got := (Tenant{Kind: Project, Name: "web", ID: id}).KeySegment(); got != id {
		t.Fatalf("segment %q, want the storage id %q", got, id)
	}
	if ValidProjectName(id) || ValidProjectName(UnresolvedSegment) {
		t.Fatal("a storage id or the unresolved segment is a valid project name")
	}
	for id, want := range map[string]bool{id: true, "web": true, PlatformSegment: false, UnresolvedSegment: false, "p.": false, "p.a/b": false, "p._x": false, "": false, "a/b": false} {
		if ValidProjectID(id) != want {
			t.Errorf("ValidProjectID(%q) = %v, want %v", id, !want, want)
		}
	}
	if got := SegmentOf(map[string]string{AnnotationKey: "web", IDAnnotationKey: id}); got != id {
		t.Fatalf("SegmentOf with an id: %q", got)
	}
	if got := SegmentOf(map[string]string{AnnotationKey: "web"}); got != "web" {
		t.Fatalf("an object written before storage ids is stored under its project's name, got %q", got)
	}
	if got := SegmentOf(nil); got != PlatformSegment {
		t.Fatalf("SegmentOf(nil) = %q", got)
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

// TestProjectCRDsVisibility: a server that serves project-local CRDs shows
// projects apiextensions.k8s.io with its one resource, and nothing else of
// the platform's groups more.
func TestProjectCRDsVisibility(t *testing.T) {
	v := visibility{projectCRDs: true}
	if v.platformOnly(CRDs) || v.platformOnlyGroup(CRDs.Group) {
		t.Error("CustomResourceDefinitions hidden from projects on a server that serves project CRDs")
	}
	if !(visibility{}).platformOnly(CRDs) || !(visibility{}).platformOnlyGroup(CRDs.Group) {
		t.Error("CustomResourceDefinitions shown to projects on a server that serves no project CRDs")
	}
	for _, gr := range []schema.GroupResource{{Group: "apiregistration.k8s.io", Resource: "apiservices"}, {Group: "iam.miloapis.com", Resource: "roles"},
		{Group: "resourcemanager.miloapis.com", Resource: "projects"}, {Group: "authentication.k8s.io", Resource: "tokenreviews"}} {
		if !v.platformOnly(gr) {
			t.Errorf("%v shown to projects", gr)
		}
	}
	if !v.hiddenDiscoveryPath("/apis/apiregistration.k8s.io/v1") || v.hiddenDiscoveryPath("/apis/apiextensions.k8s.io/v1") ||
		v.platformOnlyPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") {
		t.Error("discovery paths of a server serving project CRDs hide the wrong groups")
	}
}
