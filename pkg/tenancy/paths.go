package tenancy

import "strings"

// Non-resource paths in a tenant context. A project or organization context
// serves only what a Kubernetes client needs of a cluster's non-resource
// endpoints: discovery, OpenAPI, version and health, and in a project its
// service account issuer's discovery documents. Everything else the server
// has (/metrics, /debug/pprof, /debug/flags, the flow-control dumps, /logs, ...)
// is about the whole process and answers 404 there, whatever RBAC a tenant
// holds: a project's own cluster-admin grants nonResourceURLs "*".

// servedInTenants reports whether a non-resource path exists in tenant contexts.
func servedInTenants(path string) bool {
	switch path {
	case "/api", "/api/", "/api/v1", "/apis", "/apis/", "/openapi/v2", "/openapi/v3", "/openapi/v3/":
		return true
	}
	if ProcessWide(path) {
		return true
	}
	if IssuerDocument(path) {
		return true
	}
	if rest, ok := strings.CutPrefix(path, "/apis/"); ok {
		// /apis/{group} and /apis/{group}/{version}; deeper paths are resource requests.
		return rest != "" && strings.Count(strings.TrimSuffix(rest, "/"), "/") <= 1
	}
	if rest, ok := strings.CutPrefix(path, "/openapi/v3/"); ok {
		return rest != ""
	}
	return false
}

// ProcessWide reports whether a path answers for the server process, the same
// in every context: version and health. Their answers do not depend on the
// tenant, so they are served to whoever the platform serves them to, without
// checking that the tenant exists: nobody can tell an existing project from a
// missing one with them.
func ProcessWide(path string) bool {
	switch path {
	case "/version", "/version/", "/healthz", "/livez", "/readyz":
		return true
	}
	return false
}

// IssuerDocument reports whether path is one of a service account issuer's
// OpenID Connect discovery documents. In a tenant context they are a
// project's own, describing its issuer (pkg/iam/satokens serves them), and
// exist nowhere else.
func IssuerDocument(path string) bool {
	return path == "/.well-known/openid-configuration" || path == "/openid/v1/jwks"
}
