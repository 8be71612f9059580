package fairness

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	"go.miloapis.com/milo/pkg/tenancy"
)

// grants is Milo IAM granting something to the users named, anywhere.
type grants map[string]bool

func (g grants) HasGrants(_ context.Context, u user.Info) bool { return g[u.GetName()] }

func TestClassify(t *testing.T) {
	sa := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:ci", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"}}
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	mallory := &user.DefaultInfo{Name: "mallory", Groups: []string{"system:authenticated"}}
	members := grants{"alice": true}
	web := tenancy.Tenant{Kind: tenancy.Project, Name: "web", ID: "p.1234"}
	for _, tc := range []struct {
		name          string
		tenant        tenancy.Tenant
		user          *user.DefaultInfo
		namespace     string
		wantNamespace string
		wantProject   bool
	}{
		{"platform", tenancy.PlatformTenant, sa, "kube-system", "kube-system", false},
		{"organization", tenancy.OrganizationTenant("acme"), alice, "organization-acme", "organization-acme", false},
		{"all projects", tenancy.AllProjectsTenant, alice, "", "", false},
		{"the project's service account", web, sa, "kube-system", "milo-project:p.1234", true},
		{"a user IAM grants in the project", web, alice, "default", "milo-project:p.1234", true},
		{"cluster-scoped, by a member", web, alice, "", "milo-project:p.1234", true},
		// APF runs before authorization: an outsider naming the project stays in its own flow.
		{"an outsider", web, mallory, "default", "default", false},
		// A name the router has not resolved is the requester's choice: never a flow.
		{"project not resolved", tenancy.ProjectTenant("web"), alice, "default", "default", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := utilflowcontrol.RequestDigest{RequestInfo: &request.RequestInfo{IsResourceRequest: true, Verb: "list", Resource: "configmaps", Namespace: tc.namespace}, User: tc.user}
			groups := len(tc.user.Groups)
			got := Classify(tenancy.WithTenant(context.Background(), tc.tenant), d, members)
			if got.RequestInfo.Namespace != tc.wantNamespace {
				t.Errorf("namespace %q, want %q", got.RequestInfo.Namespace, tc.wantNamespace)
			}
			hasGroup := false
			for _, g := range got.User.GetGroups() {
				hasGroup = hasGroup || g == ProjectRequestsGroup
			}
			if hasGroup != tc.wantProject || got.User.GetName() != tc.user.Name {
				t.Errorf("user %+v", got.User)
			}
			// The request's own digest is never changed.
			if d.RequestInfo.Namespace != tc.namespace || len(tc.user.Groups) != groups {
				t.Errorf("the request's digest changed: %+v %+v", d.RequestInfo, tc.user)
			}
		})
	}
}

// TestListsShares checks the shares that give the lists' level the
// concurrency asked for, by APF's own rule: a level gets
// ceil(server * shares / all shares) seats.
func TestListsShares(t *testing.T) {
	seats := func(server, shares, others int) int { return (server*shares + shares + others - 1) / (shares + others) }
	// Upstream's levels hold 245 shares, milo-projects 100.
	for _, tc := range []struct{ want, server, wantSeats int }{
		{2, 600, 2}, {4, 600, 4}, {16, 600, 16}, {64, 3000, 64}, {2, 2, 2},
	} {
		shares := Lists{Concurrency: tc.want, ServerConcurrency: tc.server}.shares(345)
		if shares < 1 {
			t.Fatalf("%+v: shares %d", tc, shares)
		}
		if got := seats(tc.server, int(shares), 345); got > tc.wantSeats || (tc.server > 2*tc.want && got < tc.wantSeats-tc.wantSeats/8) {
			t.Errorf("concurrency %d of %d: shares %d give %d seats, want %d", tc.want, tc.server, shares, got, tc.wantSeats)
		}
	}
	if got := (Lists{ServerConcurrency: 600}).shares(345); got < 1 {
		t.Errorf("the default gives %d shares", got)
	}
}
