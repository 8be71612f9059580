package tenancy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
)

// gates serves widgets.example.com/widgets in project id-a only, and lists
// the Service "widgets".
type gates struct{ synced bool }

var widgetsGR = schema.GroupResource{Group: "widgets.example.com", Resource: "widgets"}

func (g gates) Synced() bool { return g.synced }
func (g gates) Served(t Tenant, gr schema.GroupResource) bool {
	return gr != widgetsGR || t.Kind == Platform || (t.Kind == Project && t.ID == "id-a")
}
func (g gates) GroupHidden(t Tenant, group string) bool {
	return group == widgetsGR.Group && !g.Served(t, widgetsGR)
}
func (g gates) Listed(name string) bool { return name == "widgets" }
func (g gates) ListedSelector() string  { return "phase in (Published)" }
func (g gates) Watch(ctx context.Context, _ string, _ schema.GroupResource) (context.Context, func()) {
	return ctx, func() {}
}

// CheckServices, behind the existence check: what it answers for each
// tenant, resource and user, and what it hands on.
func TestCheckServices(t *testing.T) {
	resolver := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	for _, c := range []struct {
		name      string
		tenant    Tenant
		path      string
		superuser bool
		unsynced  bool
		code      int
		// passed: the request reaches the handler, with this tenant and query.
		tenantKind Kind
		query      string
	}{
		{name: "an enabling project", tenant: Tenant{Kind: Project, Name: "a", ID: "id-a"}, path: "/apis/widgets.example.com/v1/namespaces/default/widgets/w", code: 200, tenantKind: Project},
		{name: "another project", tenant: Tenant{Kind: Project, Name: "b", ID: "id-b"}, path: "/apis/widgets.example.com/v1/namespaces/default/widgets/w", code: 404},
		{name: "another project's status", tenant: Tenant{Kind: Project, Name: "b", ID: "id-b"}, path: "/apis/widgets.example.com/v1/namespaces/default/widgets/w/status", code: 404},
		{name: "another project's watch", tenant: Tenant{Kind: Project, Name: "b", ID: "id-b"}, path: "/apis/widgets.example.com/v1/widgets?watch=true", code: 404},
		{name: "a superuser in another project", tenant: Tenant{Kind: Project, Name: "b", ID: "id-b"}, superuser: true, path: "/apis/widgets.example.com/v1/namespaces/default/widgets/w", code: 200, tenantKind: Project},
		{name: "an ungated resource", tenant: Tenant{Kind: Project, Name: "b", ID: "id-b"}, path: "/api/v1/namespaces/default/configmaps/c", code: 200, tenantKind: Project},
		{name: "an organization", tenant: OrganizationTenant("acme"), path: "/apis/widgets.example.com/v1/namespaces/organization-acme/widgets", code: 404},
		{name: "before the catalog has loaded", tenant: Tenant{Kind: Project, Name: "a", ID: "id-a"}, unsynced: true, path: "/api/v1/namespaces/default/configmaps/c", code: 503},
		{name: "the catalog listed in a project", tenant: Tenant{Kind: Project, Name: "b", ID: "id-b"}, path: "/apis/services.miloapis.com/v1alpha1/services?labelSelector=a%3Db", code: 200,
			tenantKind: Platform, query: "labelSelector=a%3Db%2Cphase+in+%28Published%29"},
		{name: "a listed Service in an organization", tenant: OrganizationTenant("acme"), path: "/apis/services.miloapis.com/v1alpha1/services/widgets", code: 200, tenantKind: Platform},
		{name: "a Service outside the catalog", tenant: OrganizationTenant("acme"), path: "/apis/services.miloapis.com/v1alpha1/services/draft", code: 404},
		{name: "the catalog to a superuser in a project", tenant: Tenant{Kind: Project, Name: "b", ID: "id-b"}, superuser: true, path: "/apis/services.miloapis.com/v1alpha1/services/draft", code: 200, tenantKind: Platform},
	} {
		var reached *http.Request
		r := &Router{Services: gates{synced: !c.unsynced}, Serializer: scheme.Codecs}
		h := r.CheckServices(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { reached = req }))
		req := httptest.NewRequest(http.MethodGet, c.path, nil)
		info, err := resolver.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		u := &user.DefaultInfo{Name: "someone"}
		if c.superuser {
			u.Groups = []string{user.SystemPrivilegedGroup}
		}
		ctx := request.WithUser(request.WithRequestInfo(WithTenant(req.Context(), c.tenant), info), u)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		if reached != nil {
			rec.Code = 200
		}
		if rec.Code != c.code {
			t.Errorf("%s: %d, want %d (%s)", c.name, rec.Code, c.code, strings.TrimSpace(rec.Body.String()))
			continue
		}
		if reached == nil {
			continue
		}
		if got := From(reached.Context()).Kind; got != c.tenantKind {
			t.Errorf("%s: handed on as tenant kind %v, want %v", c.name, got, c.tenantKind)
		}
		if c.query != "" && reached.URL.RawQuery != c.query {
			t.Errorf("%s: query %q, want %q", c.name, reached.URL.RawQuery, c.query)
		}
	}
}
