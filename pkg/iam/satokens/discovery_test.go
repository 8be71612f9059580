package satokens

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	jose "gopkg.in/go-jose/go-jose.v2"
	"gopkg.in/go-jose/go-jose.v2/jwt"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	k8sserviceaccount "k8s.io/kubernetes/pkg/serviceaccount"

	"go.miloapis.com/milo/pkg/tenancy"
)

func TestIssuerDocumentsAreKubernetesPaths(t *testing.T) {
	for _, path := range []string{k8sserviceaccount.OpenIDConfigPath, k8sserviceaccount.JWKSPath} {
		if !tenancy.IssuerDocument(path) {
			t.Errorf("%s is not an issuer document", path)
		}
	}
}

// discoveryFixture serves the documents of a server whose key is key, in
// front of a handler standing for the apiserver's.
type discoveryFixture struct {
	key      *rsa.PrivateKey
	handler  http.Handler
	upstream int
}

func newDiscovery(t *testing.T, issuer, jwksURI string) *discoveryFixture {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := k8sserviceaccount.StaticPublicKeysGetter([]interface{}{&key.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	f := &discoveryFixture{key: key}
	f.handler = NewDiscovery(issuer, jwksURI, keys, legacyscheme.Codecs).Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f.upstream++
		w.WriteHeader(http.StatusTeapot)
	}))
	return f
}

func (f *discoveryFixture) get(ctx context.Context, method, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(ctx, method, path, nil)
	f.handler.ServeHTTP(rec, req)
	return rec
}

func TestProjectDiscoveryNamesTheProjectsIssuer(t *testing.T) {
	f := newDiscovery(t, serverIssuer, "")
	web := inProject("web", "p.1")

	rec := f.get(web, http.MethodGet, "/.well-known/openid-configuration")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") == "" {
		t.Fatalf("configuration: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	issuer := ProjectIssuer(serverIssuer, "web")
	want := map[string]any{
		"issuer":                                issuer,
		"jwks_uri":                              issuer + "/openid/v1/jwks",
		"response_types_supported":              []any{"id_token"},
		"subject_types_supported":               []any{"public"},
		"id_token_signing_alg_values_supported": []any{"RS256"},
	}
	if !reflect.DeepEqual(doc, want) {
		t.Fatalf("configuration %v\nwant %v", doc, want)
	}

	rec = f.get(web, http.MethodGet, "/openid/v1/jwks")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("keys: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	var keys jose.JSONWebKeySet
	if err := json.Unmarshal(rec.Body.Bytes(), &keys); err != nil || len(keys.Keys) != 1 {
		t.Fatalf("keys %s: %v", rec.Body, err)
	}

	// What a verifier outside does with them: a token of the project verifies
	// against its key set and names its issuer.
	inner, err := k8sserviceaccount.JWTTokenGenerator(serverIssuer, f.key)
	if err != nil {
		t.Fatal(err)
	}
	token := (&fixture{generator: Generator{Inner: inner, Issuer: serverIssuer, Key: f.key}}).issue(t, web, "https://vault.example.com")
	parsed, err := jwt.ParseSigned(token)
	if err != nil {
		t.Fatal(err)
	}
	matching := keys.Key(parsed.Headers[0].KeyID)
	if len(matching) != 1 {
		t.Fatalf("no key %q in %s", parsed.Headers[0].KeyID, rec.Body)
	}
	var claims jwt.Claims
	if err := parsed.Claims(matching[0].Key, &claims); err != nil {
		t.Fatal(err)
	}
	if err := claims.Validate(jwt.Expected{Issuer: doc["issuer"].(string), Audience: jwt.Audience{"https://vault.example.com"}}); err != nil {
		t.Fatal(err)
	}
	if f.upstream != 0 {
		t.Fatal("a project's document served by the apiserver")
	}
}

func TestDiscoveryElsewhere(t *testing.T) {
	f := newDiscovery(t, serverIssuer, "")
	// The platform's own documents are the apiserver's.
	if rec := f.get(context.Background(), http.MethodGet, "/.well-known/openid-configuration"); rec.Code != http.StatusTeapot {
		t.Errorf("platform: %d", rec.Code)
	}
	for name, ctx := range map[string]context.Context{
		"organization": tenancy.WithTenant(context.Background(), tenancy.OrganizationTenant("acme")),
		"all projects": tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant),
	} {
		for _, path := range []string{"/.well-known/openid-configuration", "/openid/v1/jwks"} {
			if rec := f.get(ctx, http.MethodGet, path); rec.Code != http.StatusNotFound {
				t.Errorf("%s %s: %d", name, path, rec.Code)
			}
		}
	}
	if rec := f.get(inProject("web", "p.1"), http.MethodPost, "/openid/v1/jwks"); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
	// Other paths are not its business.
	f.upstream = 0
	if f.get(inProject("web", "p.1"), http.MethodGet, "/api"); f.upstream != 1 {
		t.Error("/api not handed on")
	}
}

func TestDiscoveryKeepsTheOperatorsKeySetURL(t *testing.T) {
	f := newDiscovery(t, serverIssuer, "https://keys.example.com/jwks")
	rec := f.get(inProject("web", "p.1"), http.MethodGet, "/.well-known/openid-configuration")
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["jwks_uri"] != "https://keys.example.com/jwks" || doc["issuer"] != ProjectIssuer(serverIssuer, "web") {
		t.Fatalf("configuration %v", doc)
	}
}

func TestNoDiscoveryForAnIssuerThatIsNoURL(t *testing.T) {
	// Kubernetes serves no documents for such an issuer, and neither do projects.
	f := newDiscovery(t, "kubernetes/serviceaccount", "")
	if rec := f.get(inProject("web", "p.1"), http.MethodGet, "/.well-known/openid-configuration"); rec.Code != http.StatusNotFound {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestDiscoveryAuthorizer(t *testing.T) {
	authenticated := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	anonymous := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	web := inProject("web", "p.1")
	for name, tc := range map[string]struct {
		ctx  context.Context
		attr authorizer.AttributesRecord
		want authorizer.Decision
	}{
		"configuration":   {web, authorizer.AttributesRecord{User: authenticated, Verb: "get", Path: "/.well-known/openid-configuration"}, authorizer.DecisionAllow},
		"keys":            {web, authorizer.AttributesRecord{User: authenticated, Verb: "get", Path: "/openid/v1/jwks"}, authorizer.DecisionAllow},
		"anonymous":       {web, authorizer.AttributesRecord{User: anonymous, Verb: "get", Path: "/openid/v1/jwks"}, authorizer.DecisionNoOpinion},
		"another verb":    {web, authorizer.AttributesRecord{User: authenticated, Verb: "post", Path: "/openid/v1/jwks"}, authorizer.DecisionNoOpinion},
		"another path":    {web, authorizer.AttributesRecord{User: authenticated, Verb: "get", Path: "/metrics"}, authorizer.DecisionNoOpinion},
		"a resource":      {web, authorizer.AttributesRecord{User: authenticated, Verb: "get", Resource: "configmaps", ResourceRequest: true}, authorizer.DecisionNoOpinion},
		"the platform":    {context.Background(), authorizer.AttributesRecord{User: authenticated, Verb: "get", Path: "/openid/v1/jwks"}, authorizer.DecisionNoOpinion},
		"all projects":    {tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant), authorizer.AttributesRecord{User: authenticated, Verb: "get", Path: "/openid/v1/jwks"}, authorizer.DecisionAllow},
		"an organization": {tenancy.WithTenant(context.Background(), tenancy.OrganizationTenant("acme")), authorizer.AttributesRecord{User: authenticated, Verb: "get", Path: "/openid/v1/jwks"}, authorizer.DecisionAllow},
		"no user":         {web, authorizer.AttributesRecord{Verb: "get", Path: "/openid/v1/jwks"}, authorizer.DecisionNoOpinion},
	} {
		if got, _, _ := (DiscoveryAuthorizer{}).Authorize(tc.ctx, tc.attr); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}
