package tenancy

import (
	"testing"

	"k8s.io/apiserver/pkg/endpoints/request"
)

// TestNonResourcePathsInTenants is the table of non-resource paths a project or
// organization context serves: discovery, OpenAPI, version, health and the
// issuer's documents; nothing about the process.
func TestNonResourcePathsInTenants(t *testing.T) {
	for path, want := range map[string]bool{
		"/api": true, "/api/": true, "/api/v1": true, "/apis": true, "/apis/": true,
		"/apis/apps": true, "/apis/apps/v1": true, "/apis/apps/v1/": true,
		"/openapi/v2": true, "/openapi/v3": true, "/openapi/v3/": true, "/openapi/v3/apis/apps/v1": true,
		"/version": true, "/version/": true, "/healthz": true, "/livez": true, "/readyz": true,
		"/.well-known/openid-configuration": true, "/openid/v1/jwks": true,

		"/metrics": false, "/metrics/slis": false, "/debug/pprof/": false, "/debug/pprof/heap": false,
		"/debug/flags/v": false, "/debug/api_priority_and_fairness/dump_requests": false, "/logs": false,
		"/logs/x": false, "/healthz/etcd": false, "/livez/ping": false, "/readyz/shutdown": false,
		"/": false, "": false, "/apis/apps/v1/deployments": false, "/api/v2": false, "/openapi": false,
		"/openid/v1/jwks/": false, "/configz": false, "/flagz": false, "/statusz": false,
	} {
		if got := servedInTenants(path); got != want {
			t.Errorf("servedInTenants(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestProcessWidePaths are answered without looking at the tenant.
func TestProcessWidePaths(t *testing.T) {
	for path, want := range map[string]bool{
		"/version": true, "/version/": true, "/healthz": true, "/livez": true, "/readyz": true,
		"/api": false, "/openapi/v2": false, "/healthz/etcd": false, "/metrics": false,
	} {
		if got := ProcessWide(path); got != want {
			t.Errorf("ProcessWide(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestAllProjectsViewIsReadOnly is the table of verbs the all-projects view allows.
func TestAllProjectsViewIsReadOnly(t *testing.T) {
	for _, tc := range []struct {
		resource bool
		verb     string
		want     bool
	}{
		{true, "list", true}, {true, "watch", true},
		{true, "get", false}, {true, "create", false}, {true, "update", false}, {true, "patch", false},
		{true, "delete", false}, {true, "deletecollection", false}, {true, "impersonate", false},
		{false, "get", true}, {false, "post", false}, {false, "put", false}, {false, "delete", false},
	} {
		if got := readOnlyAcrossProjects(&request.RequestInfo{IsResourceRequest: tc.resource, Verb: tc.verb}); got != tc.want {
			t.Errorf("resource=%v verb %s: %v, want %v", tc.resource, tc.verb, got, tc.want)
		}
	}
}

// TestPlatformOnlyGroups: whole groups hidden from projects, and the one group
// projects see partly (iam.miloapis.com, for its ServiceAccounts).
func TestPlatformOnlyGroups(t *testing.T) {
	for group, want := range map[string]bool{
		"apiextensions.k8s.io": true, "apiregistration.k8s.io": true, "flowcontrol.apiserver.k8s.io": true,
		"internal.apiserver.k8s.io": true, "storagemigration.k8s.io": true, "admissionregistration.k8s.io": true,
		"certificates.k8s.io": true, "resourcemanager.miloapis.com": true,
		"iam.miloapis.com": false, "": false, "apps": false, "rbac.authorization.k8s.io": false,
		"authentication.k8s.io": false, "authorization.k8s.io": false, "coordination.k8s.io": false,
	} {
		if got := PlatformOnlyGroup(group); got != want {
			t.Errorf("PlatformOnlyGroup(%q) = %v, want %v", group, got, want)
		}
	}
}
