package tenantstorage

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"

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

// fakeList answers GetList with n ConfigMaps (and a continue token when more
// would follow), recording the options it was asked with.
type fakeList struct {
	storage.Interface
	n     int
	more  bool
	asked storage.ListOptions
}

func (f *fakeList) GetList(_ context.Context, _ string, opts storage.ListOptions, listObj runtime.Object) error {
	f.asked = opts
	l := listObj.(*corev1.ConfigMapList)
	l.Items = make([]corev1.ConfigMap, f.n)
	if f.more {
		l.Continue = "next"
	}
	return nil
}

// What a bounded list asks of the storage, and what it answers.
func TestBoundedList(t *testing.T) {
	const max = 10
	for _, c := range []struct {
		name           string
		limit          int64
		rv             string
		match          metav1.ResourceVersionMatch
		n              int
		more           bool
		wantLimit      int64
		wantRV         string
		wantMatch      metav1.ResourceVersionMatch
		wantBadRequest bool
	}{
		{name: "unpaged, within the bound", n: 4, wantLimit: max + 1},
		{name: "unpaged, past the bound", n: max + 1, wantLimit: max + 1, wantBadRequest: true},
		{name: "unpaged, more to follow", n: max, more: true, wantLimit: max + 1, wantBadRequest: true},
		{name: "unpaged at 0: read at the current revision", rv: "0", n: 4, wantLimit: max + 1},
		{name: "unpaged at a revision keeps 'not older than'", rv: "42", n: 4, wantLimit: max + 1, wantRV: "42", wantMatch: metav1.ResourceVersionMatchNotOlderThan},
		{name: "unpaged, exactly at a revision", rv: "42", match: metav1.ResourceVersionMatchExact, n: 4, wantLimit: max + 1, wantRV: "42", wantMatch: metav1.ResourceVersionMatchExact},
		{name: "a page within the bound", limit: 5, n: 5, more: true, wantLimit: 5},
		{name: "a page at 0 honours its limit", limit: 5, rv: "0", n: 5, more: true, wantLimit: 5},
		{name: "a page past the bound is cut", limit: 500, n: max, more: true, wantLimit: max},
	} {
		f := &fakeList{n: c.n, more: c.more}
		s := &store{Interface: f, resource: corev1.Resource("configmaps"), maxListItems: max}
		opts := storage.ListOptions{ResourceVersion: c.rv, ResourceVersionMatch: c.match, Predicate: storage.SelectionPredicate{Limit: c.limit}}
		err := s.boundedList(context.Background(), "/configmaps/p.1/team", opts, &corev1.ConfigMapList{})
		if got := apierrors.IsBadRequest(err); got != c.wantBadRequest || (err != nil && !got) {
			t.Errorf("%s: %v, want bad request %v", c.name, err, c.wantBadRequest)
		}
		if f.asked.Predicate.Limit != c.wantLimit || f.asked.ResourceVersion != c.wantRV || f.asked.ResourceVersionMatch != c.wantMatch {
			t.Errorf("%s: asked the storage for limit %d at %q (%q), want %d at %q (%q)", c.name,
				f.asked.Predicate.Limit, f.asked.ResourceVersion, f.asked.ResourceVersionMatch, c.wantLimit, c.wantRV, c.wantMatch)
		}
	}
}
