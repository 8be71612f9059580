package tenancy

import (
	"context"
	"encoding/json"
	"fmt"
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
func (g gates) GroupView(t Tenant, group string) string {
	if group != widgetsGR.Group {
		return ""
	}
	return fmt.Sprintf("widgets=%t", g.Served(t, widgetsGR))
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

// A tenant's OpenAPI v3 index names a gated group's document by a hash of
// what the tenant is served, so enabling a service changes it; the document
// asked for by that hash is cached for good, by another served uncached.
func TestOpenAPIGroupHashFollowsTheTenantsView(t *testing.T) {
	a := visibility{gates: gates{synced: true}, tenant: Tenant{Kind: Project, ID: "id-a"}}
	b := visibility{gates: gates{synced: true}, tenant: Tenant{Kind: Project, ID: "id-b"}}
	ha, hb := openAPIGroupHash("PLATFORM", a, widgetsGR.Group), openAPIGroupHash("PLATFORM", b, widgetsGR.Group)
	if ha == "PLATFORM" || hb == "PLATFORM" || ha == hb {
		t.Fatalf("a gated group's hashes: %q (served) and %q (not): want two of their own", ha, hb)
	}
	if h := openAPIGroupHash("PLATFORM", a, "apps"); h != "PLATFORM" {
		t.Fatalf("an ungated group's hash %q, want the platform's", h)
	}
	index := `{"paths":{"apis/widgets.example.com/v1":{"serverRelativeURL":"/openapi/v3/apis/widgets.example.com/v1?hash=PLATFORM"},"apis/apps/v1":{"serverRelativeURL":"/openapi/v3/apis/apps/v1?hash=APPS"}}}`
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(index), &doc); err != nil {
		t.Fatal(err)
	}
	out, ok := filterOpenAPIIndex(doc, a)
	if !ok || !strings.Contains(string(out), "hash="+ha) || !strings.Contains(string(out), "hash=APPS") {
		t.Fatalf("the index of the project served widgets: %s", out)
	}

	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hash") != "" {
			http.Redirect(w, r, "/openapi/v3/apis/widgets.example.com/v1?hash=PLATFORM", http.StatusMovedPermanently)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Etag", `"PLATFORM"`)
		w.Write([]byte(`{"openapi":"3.0.0","paths":{}}`)) //nolint:errcheck
	})
	for hash, immutable := range map[string]bool{ha: true, "PLATFORM": false, "": false} {
		req := httptest.NewRequest(http.MethodGet, "/openapi/v3/apis/widgets.example.com/v1?hash="+hash, nil)
		rec := httptest.NewRecorder()
		serveFilteredDiscovery(inner, rec, req, a, func() (visibility, ownGroups) { return a, ownGroups{} })
		if rec.Code != http.StatusOK {
			t.Fatalf("asked by hash %q: %d %s, want 200", hash, rec.Code, rec.Body)
		}
		if got := strings.Contains(rec.Header().Get("Cache-Control"), "immutable"); got != immutable {
			t.Errorf("asked by hash %q: Cache-Control %q, immutable %v", hash, rec.Header().Get("Cache-Control"), immutable)
		}
	}
}

// Until the catalog has loaded, a tenant's discovery answers 503 with
// Retry-After, as its resource requests do: what Services hide cannot be
// told yet.
func TestDiscoveryWaitsForTheCatalog(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)) //nolint:errcheck
	})
	for synced, code := range map[bool]int{true: http.StatusOK, false: http.StatusServiceUnavailable} {
		v := visibility{gates: gates{synced: synced}, tenant: AllProjectsTenant}
		rec := httptest.NewRecorder()
		serveFilteredDiscovery(inner, rec, httptest.NewRequest(http.MethodGet, "/apis", nil), visibility{}, func() (visibility, ownGroups) { return v, ownGroups{} })
		if rec.Code != code {
			t.Errorf("discovery with the catalog synced %v: %d, want %d", synced, rec.Code, code)
		}
		if !synced && (rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), `"code":503`)) {
			t.Errorf("discovery before the catalog loaded: Retry-After %q, body %s", rec.Header().Get("Retry-After"), rec.Body)
		}
	}
}
