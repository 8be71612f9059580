package tenancy

import (
	"context"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
)

type anyOrganization struct{}

func (anyOrganization) OrganizationExists(context.Context, string) (bool, error) { return true, nil }
func (anyOrganization) OrganizationOf(context.Context, schema.GroupResource, string) (string, bool, error) {
	return "acme", true, nil
}

// What an organization's context serves, verb by verb: answered at once
// (code), or handed on narrowed to the organization (a label requirement, a
// namespace, an existence check of the object's organization).
func TestOrganizationRoutes(t *testing.T) {
	resolver := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	r := &Router{Hierarchy: anyOrganization{}, Serializer: scheme.Codecs}
	const rm = "/apis/resourcemanager.miloapis.com/v1alpha1"
	for _, c := range []struct {
		method, path string
		code         int    // 0: handed on
		label        string // the label requirement added
		path2        string // the path handed on, if rewritten
		objectCheck  bool   // the object's organization is checked
	}{
		{method: "GET", path: rm + "/organizations/acme"},
		{method: "GET", path: rm + "/organizations/other", code: 404},
		{method: "DELETE", path: rm + "/organizations/acme", code: 404},
		{method: "GET", path: rm + "/projects", label: OrganizationLabel + "=acme"},
		{method: "GET", path: rm + "/projects/web", objectCheck: true},
		{method: "DELETE", path: rm + "/projects", code: 405},
		{method: "GET", path: rm + "/projectsuspensions", label: OrganizationLabel + "=acme"},
		{method: "GET", path: rm + "/projectsuspensions?watch=true", label: OrganizationLabel + "=acme"},
		{method: "GET", path: rm + "/projectsuspensions/web-billing", objectCheck: true},
		{method: "GET", path: rm + "/projectsuspensions/web-billing/status", objectCheck: true},
		{method: "DELETE", path: rm + "/projectsuspensions/web-billing", objectCheck: true},
		{method: "POST", path: rm + "/projectsuspensions", code: 405},
		{method: "PUT", path: rm + "/projectsuspensions/web-billing", code: 405},
		{method: "PATCH", path: rm + "/projectsuspensions/web-billing/status", code: 405},
		{method: "DELETE", path: rm + "/projectsuspensions", code: 405},
		{method: "GET", path: "/api/v1/configmaps", path2: "/api/v1/namespaces/organization-acme/configmaps"},
		{method: "GET", path: "/api/v1/namespaces/other/configmaps", code: 404},
		{method: "GET", path: "/apis/services.miloapis.com/v1alpha1/services"},
		{method: "POST", path: "/apis/services.miloapis.com/v1alpha1/services", code: 405},
		{method: "GET", path: "/apis/services.miloapis.com/v1alpha1/serviceactivations", code: 404},
		{method: "GET", path: "/api/v1/nodes/n1", code: 404},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		info, err := resolver.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		out := r.routeOrganization(rec, req.WithContext(request.WithRequestInfo(req.Context(), info)), info, "acme")
		name := c.method + " " + c.path
		if c.code != 0 {
			if out != nil || rec.Code != c.code {
				t.Errorf("%s: handed on %v, answered %d; want %d", name, out != nil, rec.Code, c.code)
			}
			continue
		}
		if out == nil {
			t.Errorf("%s: answered %d, want it handed on", name, rec.Code)
			continue
		}
		if got := out.URL.Query().Get("labelSelector"); got != c.label {
			t.Errorf("%s: label selector %q, want %q", name, got, c.label)
		}
		if c.path2 != "" && out.URL.Path != c.path2 {
			t.Errorf("%s: handed on as %s, want %s", name, out.URL.Path, c.path2)
		}
		check, _ := out.Context().Value(existenceCheckKey{}).(existenceCheck)
		if check.org != "acme" || (check.orgObject != nil) != c.objectCheck {
			t.Errorf("%s: existence check %+v, want the organization's, of the object %v", name, check, c.objectCheck)
		}
	}
}
