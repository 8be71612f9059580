package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	jose "gopkg.in/go-jose/go-jose.v2"
	"gopkg.in/go-jose/go-jose.v2/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/iam/satokens"
	"go.miloapis.com/milo/pkg/tenancy"
)

// payloadOf decodes a JWT's claims without verifying them.
func payloadOf(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", token)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	return claims
}

// fetch GETs url as a client outside Milo does, trusting Milo's CA, with a
// bearer token ("" for none).
func (m *milo) fetch(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	client, err := rest.HTTPClientFor(rest.AnonymousClientConfig(m.restConfig(t)))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// fetchOK is fetch that must answer 200 once reader's access has arrived.
func (m *milo) fetchOK(t *testing.T, url, reader string) []byte {
	t.Helper()
	var body []byte
	eventually(t, "GET "+url, func() error {
		var code int
		code, body = m.fetch(t, url, reader)
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	return body
}

// verifyAsOutsider checks a token the way a relying party that trusts the
// issuer does: discovery at {issuer}/.well-known/openid-configuration (read
// with reader's token), the key set at its jwks_uri, then signature, issuer,
// audience and expiry. It returns the discovery document.
func (m *milo) verifyAsOutsider(t *testing.T, issuer, reader, token, audience string) (map[string]any, error) {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(m.fetchOK(t, issuer+"/.well-known/openid-configuration", reader), &doc); err != nil {
		t.Fatal(err)
	}
	jwksURI, _ := doc["jwks_uri"].(string)
	var keys jose.JSONWebKeySet
	if err := json.Unmarshal(m.fetchOK(t, jwksURI, reader), &keys); err != nil {
		t.Fatal(err)
	}
	parsed, err := jwt.ParseSigned(token)
	if err != nil {
		return doc, err
	}
	matching := keys.Key(parsed.Headers[0].KeyID)
	if len(matching) == 0 {
		return doc, fmt.Errorf("no key %q at %s", parsed.Headers[0].KeyID, jwksURI)
	}
	var claims jwt.Claims
	if err := parsed.Claims(matching[0].Key, &claims); err != nil {
		return doc, err
	}
	iss, _ := doc["issuer"].(string)
	return doc, claims.ValidateWithLeeway(jwt.Expected{Issuer: iss, Audience: jwt.Audience{audience}, Time: time.Now()}, 0)
}

// TestEachProjectIsAnIssuer: the service accounts default/ci of two projects
// get tokens of different issuers, each project serves the discovery
// documents of its own issuer, against which its tokens verify outside Milo,
// and Milo accepts a token only in its project and only for its own audience.
func TestEachProjectIsAnIssuer(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "issuer-a"), m.newProject(t, "issuer-b")
	for _, p := range []string{a, b} {
		createServiceAccount(t, m.projectKube(t, p), "default", "ci")
	}
	kubeconfigA := m.projectKubeconfig(t, a)
	createToken := func(args ...string) string {
		t.Helper()
		r := m.kubectlWith(t, kubeconfigA, "", append([]string{"create", "token", "ci"}, args...)...)
		if r.err != nil {
			t.Fatalf("kubectl create token in %s: %v %s", a, r.err, r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}
	tokenA := createToken()
	requestB, err := m.projectKube(t, b).CoreV1().ServiceAccounts("default").CreateToken(ctx, "ci", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenB := requestB.Status.Token

	// The same subject, two issuers: the server's URL and the project's prefix.
	issuer := map[string]string{a: m.URL + tenancy.ProjectPath(a), b: m.URL + tenancy.ProjectPath(b)}
	claimsA, claimsB := payloadOf(t, tokenA), payloadOf(t, tokenB)
	for p, claims := range map[string]map[string]any{a: claimsA, b: claimsB} {
		if claims["iss"] != issuer[p] || claims["sub"] != "system:serviceaccount:default:ci" || claims[satokens.ProjectClaim] != p {
			t.Fatalf("token of %s: %v", p, claims)
		}
		if id, _ := claims[satokens.ProjectIDClaim].(string); id == "" {
			t.Fatalf("token of %s has no project id: %v", p, claims)
		}
	}
	if claimsA[satokens.ProjectIDClaim] == claimsB[satokens.ProjectIDClaim] {
		t.Fatalf("both projects' tokens have the id %v", claimsA[satokens.ProjectIDClaim])
	}

	// Milo: each token in its own project only.
	ciA := m.as(t, tokenA, tenancy.ProjectPath(a))
	eventually(t, "A's token in A", func() error {
		_, err := ciA.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	})
	for where, path := range map[string]string{"project " + b: tenancy.ProjectPath(b), "the platform": ""} {
		_, err := m.as(t, tokenA, path).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Fatalf("A's token in %s: %v, want Unauthorized", where, err)
		}
	}

	// The platform keeps its own issuer and documents.
	var platformDoc map[string]any
	if err := json.Unmarshal(m.fetchOK(t, m.URL+"/.well-known/openid-configuration", tokenOfPlatform(t, m)), &platformDoc); err != nil {
		t.Fatal(err)
	}
	if platformDoc["issuer"] != m.URL || !reflect.DeepEqual(platformDoc["response_types_supported"], []any{"id_token"}) {
		t.Fatalf("the platform's discovery: %v", platformDoc)
	}

	// Outside: each project's documents name its issuer, and its tokens
	// verify against them and not against the other project's. The project's
	// own service account may read them, as in any cluster.
	for p, token := range map[string]string{a: tokenA, b: tokenB} {
		doc, err := m.verifyAsOutsider(t, issuer[p], token, token, m.URL)
		if err != nil {
			t.Fatalf("%s's token against its issuer: %v", p, err)
		}
		// The platform's document (one key signs for all), but the project's issuer.
		want := map[string]any{}
		for k, v := range platformDoc {
			want[k] = v
		}
		want["issuer"], want["jwks_uri"] = issuer[p], issuer[p]+"/openid/v1/jwks"
		if !reflect.DeepEqual(doc, want) {
			t.Fatalf("discovery of %s: %v\nwant %v", p, doc, want)
		}
	}
	if _, err := m.verifyAsOutsider(t, issuer[b], tokenB, tokenA, m.URL); err == nil {
		t.Fatal("A's token verifies as one of B's issuer")
	}
	// A token for someone else is theirs to verify, and Milo refuses it.
	vault := createToken("--audience", "https://vault.example.com")
	if _, err := m.verifyAsOutsider(t, issuer[a], tokenA, vault, "https://vault.example.com"); err != nil {
		t.Fatalf("the vault token against A's issuer: %v", err)
	}
	if _, err := m.as(t, vault, tenancy.ProjectPath(a)).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("the vault token at Milo: %v, want Unauthorized", err)
	}

	// Who reads them: anyone with access to the project; an outsider gets the
	// answer of a missing project; anonymous readers once the project says so.
	member := sharedIssuer.sign(t, idToken{email: "issuer-member-" + a + "@example.com"})
	outsider := sharedIssuer.sign(t, idToken{email: "issuer-outsider-" + a + "@example.com"})
	adminA := m.projectKube(t, a)
	if _, err := adminA.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "member-views"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "issuer-member-" + a + "@example.com"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.fetchOK(t, issuer[a]+"/openid/v1/jwks", member)
	missing := m.URL + tenancy.ProjectPath("no-such-"+a)
	for _, reader := range []string{outsider, ""} {
		var answers []string
		for _, iss := range []string{issuer[a], missing} {
			code, body := m.fetch(t, iss+"/.well-known/openid-configuration", reader)
			if code != http.StatusForbidden {
				t.Fatalf("GET %s/.well-known/openid-configuration with %q: %d %s, want 403", iss, reader, code, body)
			}
			answers = append(answers, strings.ReplaceAll(string(body), "no-such-"+a, a))
		}
		if answers[0] != answers[1] {
			t.Fatalf("an existing and a missing project answer differently:\n%s\n%s", answers[0], answers[1])
		}
	}
	if _, err := adminA.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "public-issuer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:unauthenticated"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.verifyAsOutsider(t, issuer[a], "", tokenA, m.URL); err != nil {
		t.Fatalf("anonymous verification against A's public issuer: %v", err)
	}
	if code, body := m.fetch(t, issuer[b]+"/openid/v1/jwks", ""); code != http.StatusForbidden {
		t.Fatalf("anonymous GET of B's keys: %d %s, want 403", code, body)
	}

	// The documents belong to a project's control plane and to no other path.
	admin := m.restConfig(t)
	for _, base := range []string{tenancy.OrganizationPath("acme"), tenancy.AllProjectsPath, "/apis/resourcemanager.miloapis.com/v1alpha1/projects/" + a} {
		for _, path := range []string{"/.well-known/openid-configuration", "/openid/v1/jwks"} {
			cfg := rest.CopyConfig(admin)
			cfg.Host = m.URL + base
			_, err := kubeFor(t, cfg).Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
			if !apierrors.IsNotFound(err) {
				t.Errorf("GET %s%s as the admin: %v, want NotFound", base, path, err)
			}
		}
	}
}

// tokenOfPlatform is a token of a platform service account, which reads the
// platform's discovery documents by Kubernetes' default binding.
func tokenOfPlatform(t *testing.T, m *milo) string {
	t.Helper()
	name := fmt.Sprintf("issuer-%d", projectSeq.Add(1))
	createServiceAccount(t, m.kube(t), "default", name)
	tr, err := m.kube(t).CoreV1().ServiceAccounts("default").CreateToken(context.Background(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if iss := payloadOf(t, tr.Status.Token)["iss"]; iss != m.URL {
		t.Fatalf("a platform token of issuer %v, want %s", iss, m.URL)
	}
	return tr.Status.Token
}
