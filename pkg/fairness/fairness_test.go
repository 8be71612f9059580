package fairness

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	"go.miloapis.com/milo/pkg/tenancy"
)

func TestClassify(t *testing.T) {
	u := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:ci", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"}}
	digest := func(ns string) utilflowcontrol.RequestDigest {
		return utilflowcontrol.RequestDigest{RequestInfo: &request.RequestInfo{IsResourceRequest: true, Verb: "list", Resource: "configmaps", Namespace: ns}, User: u}
	}
	for _, tc := range []struct {
		name           string
		tenant         tenancy.Tenant
		namespace      string
		wantNamespace  string
		wantProjectGrp bool
	}{
		{"platform", tenancy.PlatformTenant, "kube-system", "kube-system", false},
		{"organization", tenancy.OrganizationTenant("acme"), "organization-acme", "organization-acme", false},
		{"all projects", tenancy.AllProjectsTenant, "", "", false},
		{"project by id", tenancy.Tenant{Kind: tenancy.Project, Name: "web", ID: "p.1234"}, "kube-system", "milo-project:p.1234", true},
		{"cluster-scoped in a project", tenancy.Tenant{Kind: tenancy.Project, Name: "web", ID: "p.1234"}, "", "milo-project:p.1234", true},
		{"project not resolved yet", tenancy.ProjectTenant("web"), "default", "milo-project:name:web", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := digest(tc.namespace)
			got := Classify(tenancy.WithTenant(context.Background(), tc.tenant), d)
			if got.RequestInfo.Namespace != tc.wantNamespace {
				t.Errorf("namespace %q, want %q", got.RequestInfo.Namespace, tc.wantNamespace)
			}
			hasGroup := false
			for _, g := range got.User.GetGroups() {
				hasGroup = hasGroup || g == ProjectRequestsGroup
			}
			if hasGroup != tc.wantProjectGrp || got.User.GetName() != u.Name {
				t.Errorf("user %+v", got.User)
			}
			// The request's own digest is never changed.
			if d.RequestInfo.Namespace != tc.namespace || len(u.Groups) != 2 {
				t.Errorf("the request's digest changed: %+v %+v", d.RequestInfo, u)
			}
		})
	}
}
