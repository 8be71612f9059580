package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"go.miloapis.com/milo/pkg/tenancy"
)

// TestProjectDiscoveryAndOpenAPIMatchWhatIsServed: a project's discovery and
// OpenAPI come from the same rule as its router (tenancy.PlatformOnly, with
// CRDs served in projects on the shared server): every
// document an index names answers 200, every resource discovery lists is
// served, and every resource the platform serves that is not platform-only is
// in the project's discovery — and the platform-only ones are absent and 404.
func TestProjectDiscoveryAndOpenAPIMatchWhatIsServed(t *testing.T) {
	m := shared
	ctx := context.Background()
	p := m.newProject(t, "discovery")
	project := m.projectKube(t, p)
	raw := project.Discovery().RESTClient()

	_, projectLists, err := project.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	inProject := map[schema.GroupResource]bool{}
	for _, list := range projectLists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		// The group version's own document.
		path := "/apis/" + list.GroupVersion
		if gv.Group == "" {
			path = "/api/" + gv.Version
		}
		if err := raw.Get().AbsPath(path).Do(ctx).Error(); err != nil {
			t.Errorf("discovery names %s, which answers %v", path, err)
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			gr := schema.GroupResource{Group: gv.Group, Resource: r.Name}
			inProject[gr] = true
			if hiddenInProjects(gr) {
				t.Errorf("project discovery lists platform-only %v", gr)
			}
			if !contains(r.Verbs, "list") {
				continue
			}
			// Every resource discovery lists is served in the project.
			if _, err := m.projectDynamic(t, p).Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
				t.Errorf("project discovery lists %v, whose list answers %v", gr, err)
			}
		}
	}

	// Everything the platform serves is in the project's discovery unless
	// platform-only, and then it answers 404 in the project.
	_, platformLists, err := m.kube(t).Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range platformLists {
		gv, _ := schema.ParseGroupVersion(list.GroupVersion)
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			gr := schema.GroupResource{Group: gv.Group, Resource: r.Name}
			switch {
			case hiddenInProjects(gr) && inProject[gr]:
				t.Errorf("platform-only %v in the project's discovery", gr)
			case hiddenInProjects(gr) && contains(r.Verbs, "list"):
				_, err := m.projectDynamic(t, p).Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{Limit: 1})
				if err == nil || !strings.Contains(err.Error(), "could not find the requested resource") {
					t.Errorf("platform-only %v listed in the project: %v", gr, err)
				}
			case !hiddenInProjects(gr) && !inProject[gr]:
				t.Errorf("%v is served in projects but missing from their discovery", gr)
			}
		}
	}

	// Every document the project's OpenAPI v3 index names answers 200, and each
	// of the project's group versions has one.
	body, err := raw.Get().AbsPath("/openapi/v3").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(body, &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Paths) < 10 || !inProject[schema.GroupResource{Resource: "configmaps"}] || !inProject[schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "roles"}] {
		t.Fatalf("the project's discovery (%d resources) or OpenAPI index (%d documents) is missing what every project serves", len(inProject), len(index.Paths))
	}
	for path, entry := range index.Paths {
		url := entry.ServerRelativeURL
		// The index names documents relative to the server; in a project, under its prefix.
		url = strings.TrimPrefix(url, tenancy.ProjectPath(p))
		if i := strings.Index(url, "?"); i >= 0 {
			url = url[:i]
		}
		if err := raw.Get().AbsPath(url).Do(ctx).Error(); err != nil {
			t.Errorf("the OpenAPI v3 index names %s (%s), which answers %v", path, url, err)
		}
	}
	for _, list := range projectLists {
		gv, _ := schema.ParseGroupVersion(list.GroupVersion)
		key := "apis/" + list.GroupVersion
		if gv.Group == "" {
			key = "api/" + gv.Version
		}
		if _, ok := index.Paths[key]; !ok {
			t.Errorf("the project's OpenAPI v3 index has no document for %s", list.GroupVersion)
		}
	}
}

// hiddenInProjects is tenancy.PlatformOnly on a server that serves project-local
// CRDs, as the shared server does.
func hiddenInProjects(gr schema.GroupResource) bool {
	return tenancy.PlatformOnly(gr) && gr != tenancy.CRDs
}

// TestHierarchyIsDiscoveredAsBefore: the hierarchy's group, served from typed
// storage, is in the platform's legacy discovery (an APIGroupList built from
// APIServices, which clients without aggregated discovery read) and its
// aggregated discovery, with its kinds, their status subresources and the
// milo category, as when it was served by CRDs.
func TestHierarchyIsDiscoveredAsBefore(t *testing.T) {
	m := shared
	ctx := context.Background()
	body, err := m.kube(t).Discovery().RESTClient().Get().AbsPath("/apis").SetHeader("Accept", "application/json").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var groups metav1.APIGroupList
	if err := json.Unmarshal(body, &groups); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups.Groups {
		found = found || (g.Name == "resourcemanager.miloapis.com" && g.PreferredVersion.Version == "v1alpha1")
	}
	if !found {
		t.Errorf("resourcemanager.miloapis.com/v1alpha1 missing from the legacy /apis: %s", body)
	}
	resources, err := m.kube(t).Discovery().ServerResourcesForGroupVersion("resourcemanager.miloapis.com/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range resources.APIResources {
		got[r.Name] = true
		if !strings.Contains(r.Name, "/") && !contains(r.Categories, "milo") {
			t.Errorf("%s is not in the milo category: %v", r.Name, r.Categories)
		}
	}
	for _, name := range []string{"organizations", "folders", "projects", "organizationmemberships", "projectsuspensions"} {
		if !got[name] || !got[name+"/status"] {
			t.Errorf("%s or its status missing from discovery: %v", name, got)
		}
	}
}
