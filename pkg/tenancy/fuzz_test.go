package tenancy

import (
	"strings"
	"testing"
)

// The router's parse of a URL path never yields a tenant outside the path's
// own prefix: a matched path is exactly the tenant's prefix followed by the
// rest, the tenant's name is one path segment, and a project request reaches
// only the project its prefix names.
func FuzzParsePath(f *testing.F) {
	for _, seed := range []string{
		"/api/v1/namespaces",
		ProjectPath("web") + "/api/v1/configmaps",
		ProjectPath("web"),
		ProjectPath("web") + "/../other/control-plane/api",
		ProjectPath("web") + "/" + ProjectPath("other"),
		AllProjectsPath + "/api/v1/secrets",
		OrganizationPath("acme") + "/apis",
		"/apis/resourcemanager.miloapis.com/v1alpha1/projects//control-plane/api",
		"/apis/resourcemanager.miloapis.com/v1alpha1/projects/web/control-planex/api",
		"/apis/resourcemanager.miloapis.com/v1alpha1/projects/a/b/control-plane",
		"/apis/resourcemanager.miloapis.com/v1alpha1/organizations/*/control-plane/api",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		p := parsePath(path)
		if !p.matched {
			if p.tenant != PlatformTenant || p.rest != path {
				t.Fatalf("unmatched %q gave tenant %v rest %q", path, p.tenant, p.rest)
			}
			return
		}
		if !strings.HasPrefix(p.rest, "/") {
			t.Fatalf("%q: rest %q does not start with /", path, p.rest)
		}
		if strings.Contains(p.tenant.Name, "/") {
			t.Fatalf("%q: tenant name %q spans segments", path, p.tenant.Name)
		}
		var prefix string
		switch p.tenant.Kind {
		case Project:
			prefix = ProjectPath(p.tenant.Name)
		case Organization:
			prefix = OrganizationPath(p.tenant.Name)
		case AllProjects:
			prefix = AllProjectsPath
		default:
			t.Fatalf("%q matched the platform", path)
		}
		if path != prefix+p.rest && !(p.rest == "/" && path == prefix) {
			t.Fatalf("%q is not %q + %q", path, prefix, p.rest)
		}
	})
}

// Impersonation checks never let a system identity through in a tenant context.
func FuzzImpersonableUser(f *testing.F) {
	for _, seed := range []string{"alice", "system:masters", "system:serviceaccount:default:ci", "system:serviceaccount:", "System:admin", "system:apiserver"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		for _, tenant := range []Tenant{ProjectTenant("web"), OrganizationTenant("acme"), AllProjectsTenant} {
			if impersonableUser(name, tenant) == nil && strings.HasPrefix(name, "system:") &&
				!(tenant.Kind == Project && strings.HasPrefix(name, "system:serviceaccount:") && strings.Count(name, ":") == 3) {
				t.Fatalf("%q impersonable in %s", name, tenant)
			}
			if impersonableGroup(name, tenant) == nil && strings.HasPrefix(name, "system:") && name != "system:authenticated" &&
				!(tenant.Kind == Project && strings.HasPrefix(name, "system:serviceaccounts")) {
				t.Fatalf("group %q impersonable in %s", name, tenant)
			}
		}
	})
}
