package tenancy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestOpenAPIDocumentsShowOnlyWhatProjectsServe(t *testing.T) {
	v3 := `{"openapi":"3.0.0","info":{"title":"Milo"},"paths":{
	  "/apis/iam.miloapis.com/v1alpha1/namespaces/{namespace}/serviceaccounts":{"get":{"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/com.miloapis.iam.v1alpha1.ServiceAccountList"}}}}}}},
	  "/apis/iam.miloapis.com/v1alpha1/roles":{"get":{"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/com.miloapis.iam.v1alpha1.RoleList"}}}}}}},
	  "/apis/iam.miloapis.com/v1alpha1/watch/namespaces/{namespace}/policybindings/{name}":{"get":{}}},
	  "components":{"schemas":{
	    "com.miloapis.iam.v1alpha1.ServiceAccountList":{"properties":{"items":{"items":{"$ref":"#/components/schemas/com.miloapis.iam.v1alpha1.ServiceAccount"}},"metadata":{"allOf":[{"$ref":"#/components/schemas/io.k8s.ListMeta"}]}}},
	    "com.miloapis.iam.v1alpha1.ServiceAccount":{"type":"object"},
	    "com.miloapis.iam.v1alpha1.RoleList":{"properties":{"items":{"items":{"$ref":"#/components/schemas/com.miloapis.iam.v1alpha1.Role"}}}},
	    "com.miloapis.iam.v1alpha1.Role":{"type":"object"},
	    "io.k8s.ListMeta":{"type":"object"}}}}`
	out := filterJSON(t, v3)
	for _, gone := range []string{"/roles", "policybindings", "v1alpha1.Role\"", "RoleList"} {
		if strings.Contains(out, gone) {
			t.Errorf("the filtered v3 document still has %q: %s", gone, out)
		}
	}
	for _, kept := range []string{"/serviceaccounts", "v1alpha1.ServiceAccount\"", "ServiceAccountList", "io.k8s.ListMeta", `"title":"Milo"`} {
		if !strings.Contains(out, kept) {
			t.Errorf("the filtered v3 document lost %q: %s", kept, out)
		}
	}

	v2 := `{"swagger":"2.0","paths":{
	  "/api/v1/namespaces/{namespace}/configmaps":{"get":{"responses":{"200":{"schema":{"$ref":"#/definitions/io.k8s.api.core.v1.ConfigMapList"}}}}},
	  "/apis/apiextensions.k8s.io/v1/customresourcedefinitions":{"get":{"responses":{"200":{"schema":{"$ref":"#/definitions/io.k8s.CRDList"}}}}},
	  "/apis/apiextensions.k8s.io/":{"get":{}},
	  "/apis/authentication.k8s.io/v1/tokenreviews":{"post":{"parameters":[{"schema":{"$ref":"#/definitions/io.k8s.TokenReview"}}]}},
	  "/apis/authentication.k8s.io/v1/selfsubjectreviews":{"post":{}}},
	  "definitions":{"io.k8s.api.core.v1.ConfigMapList":{"properties":{"items":{"items":{"$ref":"#/definitions/io.k8s.api.core.v1.ConfigMap"}}}},
	    "io.k8s.api.core.v1.ConfigMap":{},"io.k8s.CRDList":{},"io.k8s.TokenReview":{}}}`
	out = filterJSON(t, v2)
	for _, gone := range []string{"customresourcedefinitions", "apiextensions", "tokenreviews", "CRDList", "TokenReview"} {
		if strings.Contains(out, gone) {
			t.Errorf("the filtered v2 document still has %q: %s", gone, out)
		}
	}
	for _, kept := range []string{"configmaps", "ConfigMapList", "v1.ConfigMap\"", "selfsubjectreviews"} {
		if !strings.Contains(out, kept) {
			t.Errorf("the filtered v2 document lost %q: %s", kept, out)
		}
	}
}

func filterJSON(t *testing.T, doc string) string {
	t.Helper()
	out, ok := filterDiscovery([]byte(doc), visibility{})
	if !ok {
		t.Fatalf("not filtered: %s", doc)
	}
	var check map[string]any
	if err := json.Unmarshal(out, &check); err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// An organization's context documents its own kinds and the namespaced ones,
// not the platform's other cluster-scoped kinds.
func TestOrganizationDocumentsShowOnlyWhatItServes(t *testing.T) {
	v := visibility{org: true}
	v3 := `{"openapi":"3.0.0","paths":{
	  "/apis/iam.miloapis.com/v1alpha1/namespaces/{namespace}/roles":{"get":{}},
	  "/apis/iam.miloapis.com/v1alpha1/roles":{"get":{}},
	  "/apis/iam.miloapis.com/v1alpha1/users":{"get":{}},
	  "/apis/resourcemanager.miloapis.com/v1alpha1/projects/{name}":{"get":{}},
	  "/apis/rbac.authorization.k8s.io/v1/clusterroles":{"get":{}},
	  "/apis/apiextensions.k8s.io/v1/customresourcedefinitions":{"get":{}}}}`
	out, ok := filterDiscovery([]byte(v3), v)
	if !ok {
		t.Fatal("not filtered")
	}
	for _, gone := range []string{"/users", "clusterroles", "customresourcedefinitions"} {
		if strings.Contains(string(out), gone) {
			t.Errorf("an organization's document still has %q: %s", gone, out)
		}
	}
	for _, kept := range []string{"/namespaces/{namespace}/roles", `v1alpha1/roles"`, "projects/{name}"} {
		if !strings.Contains(string(out), kept) {
			t.Errorf("an organization's document lost %q: %s", kept, out)
		}
	}
	list := `{"kind":"APIResourceList","groupVersion":"rbac.authorization.k8s.io/v1","resources":[
	  {"name":"roles","namespaced":true},{"name":"clusterroles","namespaced":false}]}`
	if out, _ := filterDiscovery([]byte(list), v); strings.Contains(string(out), "clusterroles") || !strings.Contains(string(out), `"roles"`) {
		t.Errorf("an organization's rbac resources: %s", out)
	}
	if !v.platformOnlyGroup("apiextensions.k8s.io") || v.platformOnlyGroup("iam.miloapis.com") || v.platformOnlyGroup("resourcemanager.miloapis.com") {
		t.Error("an organization's groups")
	}
}

func TestPrefersOpenAPIProto(t *testing.T) {
	for accept, want := range map[string]bool{
		"application/com.github.proto-openapi.spec.v2@v1.0+protobuf": true, // kubectl
		"application/com.github.proto-openapi.spec.v2.v1.0+protobuf": true,
		"application/json": false,
		"":                 false,
		"*/*":              false,
		"application/json, application/com.github.proto-openapi.spec.v2.v1.0+protobuf":             false,
		"application/com.github.proto-openapi.spec.v2.v1.0+protobuf, application/json":             true,
		"application/json;q=0.5, application/com.github.proto-openapi.spec.v2.v1.0+protobuf;q=0.9": true,
		"application/vnd.kubernetes.protobuf":                                                      false,
	} {
		if got := prefersOpenAPIProto(accept); got != want {
			t.Errorf("prefersOpenAPIProto(%q) = %v, want %v", accept, got, want)
		}
	}
}

// TestFilteredDocumentsAreWholeAndUnconditional: a Range or conditional
// request for a tenant's OpenAPI document gets the whole filtered document,
// never a part of the platform's (which the inner handler, serving with
// http.ServeContent, would give) or a 304 that keeps an outdated one.
func TestFilteredDocumentsAreWholeAndUnconditional(t *testing.T) {
	platform := `{"swagger":"2.0","paths":{"/api/v1/namespaces/{namespace}/configmaps":{"get":{}},"/apis/apiregistration.k8s.io/v1/apiservices":{"get":{}}},"definitions":{}}`
	modified := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Etag", `"platform"`)
		http.ServeContent(w, r, "/openapi/v2", modified, strings.NewReader(platform))
	})
	for name, header := range map[string]http.Header{
		"range":             {"Range": {"bytes=0-"}},
		"if-modified-since": {"If-Modified-Since": {modified.Add(time.Hour).Format(http.TimeFormat)}},
		"if-none-match":     {"If-None-Match": {`"platform"`}},
		"if-range":          {"Range": {"bytes=0-10"}, "If-Range": {`"platform"`}},
	} {
		req := httptest.NewRequest(http.MethodGet, "/openapi/v2", nil)
		req.Header = header
		rec := httptest.NewRecorder()
		serveFilteredDiscovery(inner, rec, req, visibility{}, func() (visibility, ownGroups) { return visibility{}, ownGroups{} })
		body := rec.Body.String()
		if rec.Code != http.StatusOK || strings.Contains(body, "apiservices") || !strings.Contains(body, "configmaps") {
			t.Errorf("%s: %d %s, want 200 with the filtered document", name, rec.Code, body)
		}
		for _, h := range []string{"Etag", "Last-Modified", "Accept-Ranges", "Content-Range"} {
			if v := rec.Header().Get(h); v != "" {
				t.Errorf("%s: %s %q on a filtered document", name, h, v)
			}
		}
	}
}
