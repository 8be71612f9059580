package tenantstorage

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Only a tenant's own LIST requests are bounded: not the platform's, not the
// all-projects view's, not the superusers', and not what the server reads for
// itself while it serves a request (authorization, admission).
func TestListBounded(t *testing.T) {
	tenant := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	master := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	req := func(t tenancy.Tenant, u user.Info, verb string) context.Context {
		ctx := tenancy.WithTenant(context.Background(), t)
		if u != nil {
			ctx = request.WithUser(ctx, u)
		}
		if verb != "" {
			ctx = request.WithRequestInfo(ctx, &request.RequestInfo{IsResourceRequest: true, Verb: verb, Resource: "configmaps"})
		}
		return ctx
	}
	project, org := tenancy.ProjectTenant("web"), tenancy.OrganizationTenant("acme")
	for _, c := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"a project member's list", req(project, tenant, "list"), true},
		{"an organization context's list", req(org, tenant, "list"), true},
		{"a superuser's list in a project", req(project, master, "list"), false},
		{"a platform list", req(tenancy.PlatformTenant, tenant, "list"), false},
		{"the all-projects view", req(tenancy.AllProjectsTenant, tenant, "list"), false},
		{"a read while serving a get (authorization)", req(project, tenant, "get"), false},
		{"the server's own read while serving a list", ServerRead(req(project, tenant, "list")), false},
		{"no request", req(project, nil, ""), false},
	} {
		if got := listBounded(c.ctx); got != c.want {
			t.Errorf("%s: bounded %v, want %v", c.name, got, c.want)
		}
	}
}
