package satokens

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"gopkg.in/go-jose/go-jose.v2/jwt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	k8sserviceaccount "k8s.io/kubernetes/pkg/serviceaccount"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/tenantstate"
)

func jwtWith(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(payload)) + ".c2ln"
}

func TestProjectOfToken(t *testing.T) {
	invalid := tokenProject{name: invalidProject}
	for name, tc := range map[string]struct {
		token   string
		want    tokenProject
		claimed bool
	}{
		"project token":      {jwtWith(`{"sub":"x","milo.miloapis.com/project":"web","milo.miloapis.com/project-id":"p.1"}`), tokenProject{"web", "p.1"}, true},
		"platform token":     {jwtWith(`{"sub":"x"}`), tokenProject{}, false},
		"static token":       {"alice-token", tokenProject{}, false},
		"no project id":      {jwtWith(`{"milo.miloapis.com/project":"web"}`), invalid, true},
		"only a project id":  {jwtWith(`{"milo.miloapis.com/project-id":"p.1"}`), invalid, true},
		"claim not a string": {jwtWith(`{"milo.miloapis.com/project":["web"],"milo.miloapis.com/project-id":"p.1"}`), invalid, true},
		"id not a string":    {jwtWith(`{"milo.miloapis.com/project":"web","milo.miloapis.com/project-id":1}`), invalid, true},
		"empty claim":        {jwtWith(`{"milo.miloapis.com/project":"","milo.miloapis.com/project-id":"p.1"}`), invalid, true},
		"other claim":        {jwtWith(`{"milo.miloapis.com/projects":"web"}`), tokenProject{}, false},
		"payload not base64": {"a.!!!.c", tokenProject{}, false},
		"payload not json":   {"a." + base64.RawURLEncoding.EncodeToString([]byte("x")) + ".c", tokenProject{}, false},
	} {
		if got, claimed := projectOfToken(tc.token); got != tc.want || claimed != tc.claimed {
			t.Errorf("%s: %+v %v, want %+v %v", name, got, claimed, tc.want, tc.claimed)
		}
	}
}

func TestBearerToken(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer  abc ")
	if tok, header := bearerToken(req); tok != "abc" || !header {
		t.Fatalf("header token: %q %v", tok, header)
	}
	req.Header.Del("Authorization")
	req.Header.Set("Sec-WebSocket-Protocol", "v4.channel.k8s.io, "+websocketTokenPrefix+base64.RawURLEncoding.EncodeToString([]byte("def")))
	if tok, header := bearerToken(req); tok != "def" || header {
		t.Fatalf("websocket token: %q %v", tok, header)
	}
}

func TestProjectIssuer(t *testing.T) {
	const want = "https://milo.example:6443/apis/resourcemanager.miloapis.com/v1alpha1/projects/web/control-plane"
	for _, server := range []string{"https://milo.example:6443", "https://milo.example:6443/"} {
		if got := ProjectIssuer(server, "web"); got != want {
			t.Errorf("ProjectIssuer(%q): %q", server, got)
		}
	}
}

const serverIssuer = "https://milo.example:6443"

// serviceAccounts answers every lookup with default/ci of one UID, in
// whatever project: the same-named service account of a later project.
type serviceAccounts struct{}

func (serviceAccounts) New() runtime.Object { return &api.ServiceAccount{} }
func (serviceAccounts) Destroy()            {}
func (serviceAccounts) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	return &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "sa-uid"}}, nil
}

// fixture is a server's signing key, generator and authenticator.
type fixture struct {
	generator Generator
	authn     authenticator.Request
	// innerCalls counts the requests handed to the apiserver's authenticators.
	innerCalls int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := k8sserviceaccount.JWTTokenGenerator(serverIssuer, key)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := k8sserviceaccount.StaticPublicKeysGetter([]interface{}{&key.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{generator: Generator{Inner: inner, Issuer: serverIssuer, Key: key}}
	storage := tenantstate.New()
	storage.Install("", map[string]rest.Storage{"serviceaccounts": serviceAccounts{}})
	// The apiserver's authenticator, for platform tokens: it takes any
	// token for a platform service account.
	platform := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		f.innerCalls++
		return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:default:ci"}}, true, nil
	})
	f.authn = Authenticator(platform, storage, Verifier{Issuers: []string{serverIssuer}, Keys: keys, Audiences: authenticator.Audiences{serverIssuer}})
	return f
}

func inProject(name, id string) context.Context {
	return tenancy.WithTenant(context.Background(), tenancy.Tenant{Kind: tenancy.Project, Name: name, ID: id})
}

// issue makes a token for default/ci the way the TokenRequest API does.
func (f *fixture) issue(t *testing.T, ctx context.Context, audiences ...string) string {
	t.Helper()
	if len(audiences) == 0 {
		audiences = []string{serverIssuer}
	}
	sa := api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ci", UID: types.UID("sa-uid")}}
	claims, private, err := k8sserviceaccount.Claims(sa, nil, nil, nil, 3600, 0, audiences)
	if err != nil {
		t.Fatal(err)
	}
	token, err := f.generator.GenerateToken(ctx, claims, private)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func (f *fixture) authenticate(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/namespaces", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	return f.authn.AuthenticateRequest(req)
}

func payload(t *testing.T, token string) map[string]any {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	return claims
}

func TestProjectTokensNameTheirIssuerAndProject(t *testing.T) {
	f := newFixture(t)
	web := f.issue(t, inProject("web", "p.1"))
	api := f.issue(t, inProject("api", "p.2"))
	platform := f.issue(t, context.Background())
	for _, tc := range []struct {
		token          string
		iss, name, pid any
	}{
		{web, ProjectIssuer(serverIssuer, "web"), "web", "p.1"},
		{api, ProjectIssuer(serverIssuer, "api"), "api", "p.2"},
		{platform, serverIssuer, nil, nil},
	} {
		claims := payload(t, tc.token)
		if claims["iss"] != tc.iss || claims[ProjectClaim] != tc.name || claims[ProjectIDClaim] != tc.pid {
			t.Errorf("claims %v, want iss %v, project %v, id %v", claims, tc.iss, tc.name, tc.pid)
		}
		if claims["sub"] != "system:serviceaccount:default:ci" {
			t.Errorf("sub %v", claims["sub"])
		}
	}
}

func TestProjectTokensAreNotIssuedWithoutAKeyOrAResolvedProject(t *testing.T) {
	f := newFixture(t)
	claims, private, err := k8sserviceaccount.Claims(api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ci"}}, nil, nil, nil, 3600, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.generator.GenerateToken(inProject("web", ""), claims, private); err == nil {
		t.Error("a token for a project whose storage id is unknown")
	}
	external := Generator{Inner: f.generator.Inner, Issuer: serverIssuer}
	if _, err := external.GenerateToken(inProject("web", "p.1"), claims, private); err == nil {
		t.Error("a project token without the signing key")
	}
	if _, err := external.GenerateToken(context.Background(), claims, private); err != nil {
		t.Errorf("a platform token through the external signer: %v", err)
	}
}

func TestProjectTokensAreValidInTheirProjectOnly(t *testing.T) {
	f := newFixture(t)
	token := f.issue(t, inProject("web", "p.1"))

	resp, ok, err := f.authenticate(inProject("web", "p.1"), token)
	if err != nil || !ok {
		t.Fatalf("in its project: %v %v", ok, err)
	}
	if resp.User.GetName() != "system:serviceaccount:default:ci" || !slices.Contains(resp.User.GetGroups(), user.AllAuthenticated) {
		t.Fatalf("user %v", resp.User)
	}

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forger := f.generator
	forger.Key = other
	// The server's issuer with a project's claims, as earlier versions made
	// project tokens.
	sa := api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ci", UID: "sa-uid"}}
	claims, private, err := k8sserviceaccount.Claims(sa, nil, nil, nil, 3600, 0, []string{serverIssuer})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(private)
	withProject := map[string]any{}
	_ = json.Unmarshal(raw, &withProject)
	withProject[ProjectClaim], withProject[ProjectIDClaim] = "web", "p.1"
	platformIssued, err := f.generator.Inner.GenerateToken(context.Background(), claims, withProject)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := forger.GenerateToken(inProject("web", "p.1"), claims, private)
	if err != nil {
		t.Fatal(err)
	}

	for what, tc := range map[string]struct {
		ctx   context.Context
		token string
	}{
		"a later project of the same name":          {inProject("web", "p.9"), token},
		"its project, not resolved yet":             {inProject("web", ""), token},
		"another project":                           {inProject("api", "p.1"), token},
		"the platform":                              {context.Background(), token},
		"an organization":                           {tenancy.WithTenant(context.Background(), tenancy.OrganizationTenant("acme")), token},
		"all projects":                              {tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant), token},
		"another audience":                          {inProject("web", "p.1"), f.issue(t, inProject("web", "p.1"), "https://vault.example.com")},
		"the project's issuer as audience":          {inProject("web", "p.1"), f.issue(t, inProject("web", "p.1"), ProjectIssuer(serverIssuer, "web"))},
		"signed by another key":                     {inProject("web", "p.1"), forged},
		"the project's claims, the server's issuer": {inProject("web", "p.1"), platformIssued},
	} {
		f.innerCalls = 0
		if _, ok, err := f.authenticate(tc.ctx, tc.token); ok || err == nil {
			t.Errorf("%s: accepted", what)
		}
		if f.innerCalls != 0 {
			t.Errorf("%s: handed to the platform's authenticators", what)
		}
	}

	// Only in the Authorization header.
	req, _ := http.NewRequestWithContext(inProject("web", "p.1"), http.MethodGet, "/api", nil)
	req.Header.Set("Sec-WebSocket-Protocol", websocketTokenPrefix+base64.RawURLEncoding.EncodeToString([]byte(token)))
	if _, ok, _ := f.authn.AuthenticateRequest(req); ok {
		t.Error("accepted as a websocket protocol")
	}
}

func TestPlatformTokensAreRefusedInProjects(t *testing.T) {
	f := newFixture(t)
	token := f.issue(t, context.Background())
	if _, ok, err := f.authenticate(context.Background(), token); !ok || err != nil {
		t.Fatalf("at the platform: %v %v", ok, err)
	}
	if _, ok, err := f.authenticate(inProject("web", "p.1"), token); ok || err == nil {
		t.Fatal("a platform service account in a project")
	}
}

func TestUnverifiedClaimsAreTheVerifiedOnes(t *testing.T) {
	// The claims are compared before the signature is checked; swapping the
	// payload of a valid token must then break the signature.
	f := newFixture(t)
	token := f.issue(t, inProject("web", "p.1"))
	parts := strings.Split(token, ".")
	claims := payload(t, token)
	claims[ProjectIDClaim] = "p.9"
	raw, _ := json.Marshal(claims)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(raw) + "." + parts[2]
	if _, ok, err := f.authenticate(inProject("web", "p.9"), tampered); ok || err == nil {
		t.Fatal("tampered token accepted")
	}
	if _, err := jwt.ParseSigned(tampered); err != nil {
		t.Fatalf("the tampered token is not even a JWT: %v", err)
	}
}
