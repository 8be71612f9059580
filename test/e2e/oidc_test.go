package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "gopkg.in/go-jose/go-jose.v2"
	"gopkg.in/go-jose/go-jose.v2/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"go.miloapis.com/milo/pkg/iam/users"
	"go.miloapis.com/milo/pkg/tenancy"
)

// oidcIssuer is an OpenID Connect issuer on loopback TLS: discovery and JWKS
// endpoints and RS256-signed ID tokens, as a real identity provider serves them.
type oidcIssuer struct {
	server   *httptest.Server
	caFile   string
	key      *rsa.PrivateKey
	clientID string
}

const oidcKeyID = "e2e-key"

var usersGVR = schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "users"}

// startOIDCIssuer serves discovery and JWKS and writes its CA to dir.
func startOIDCIssuer(dir string) (*oidcIssuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	iss := &oidcIssuer{key: key, clientID: "milo"}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                                iss.server.URL,
			"jwks_uri":                              iss.server.URL + "/keys",
			"authorization_endpoint":                iss.server.URL + "/auth",
			"token_endpoint":                        iss.server.URL + "/token",
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: oidcKeyID, Algorithm: "RS256", Use: "sig"}}})
	})
	iss.server = httptest.NewTLSServer(mux)
	iss.caFile = filepath.Join(dir, "oidc-ca.crt")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: iss.server.Certificate().Raw})
	if err := os.WriteFile(iss.caFile, ca, 0o600); err != nil {
		iss.server.Close()
		return nil, err
	}
	return iss, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// flags configures milo start to trust this issuer.
func (i *oidcIssuer) flags() []string {
	return []string{"--oidc-issuer-url", i.server.URL, "--oidc-client-id", i.clientID, "--oidc-ca-file", i.caFile,
		"--oidc-username-claim", "email", "--oidc-groups-claim", "groups"}
}

// idToken is a token the issuer signs for email in groups; adjust changes its claims.
type idToken struct {
	email   string
	groups  []string
	adjust  func(*jwt.Claims, map[string]any)
	signKey *rsa.PrivateKey
}

func (i *oidcIssuer) sign(t *testing.T, tok idToken) string {
	t.Helper()
	key := i.key
	if tok.signKey != nil {
		key = tok.signKey
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", oidcKeyID).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	std := jwt.Claims{Issuer: i.server.URL, Subject: "sub-" + tok.email, Audience: jwt.Audience{i.clientID},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}
	extra := map[string]any{"email": tok.email, "email_verified": true, "groups": tok.groups}
	if tok.adjust != nil {
		tok.adjust(&std, extra)
	}
	raw, err := jwt.Signed(signer).Claims(std).Claims(extra).CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestOIDCUsersWithKubectl signs users in through the in-test OIDC issuer and
// drives Milo with real kubectl and token kubeconfigs: identities and groups
// come from the ID token's claims, platform RBAC and Milo IAM act on them, and
// tokens that are forged, expired, for another client or from another issuer
// are refused.
func TestOIDCUsersWithKubectl(t *testing.T) {
	m, iss := shared, sharedIssuer
	ctx := context.Background()
	dana := iss.sign(t, idToken{email: "dana@example.com", groups: []string{"acme-sre"}})
	erin := iss.sign(t, idToken{email: "erin@example.com", groups: []string{"oidc-viewers"}})

	// Who am I, as the API server sees the token.
	whoami := m.kubectlWith(t, m.tokenKubeconfig(t, dana, ""), "", "auth", "whoami", "-o", "json")
	if whoami.err != nil {
		t.Fatalf("kubectl auth whoami: %v %s", whoami.err, whoami.stderr)
	}
	var review authenticationv1.SelfSubjectReview
	if err := json.Unmarshal([]byte(whoami.stdout), &review); err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != "dana@example.com" || !contains(u.Groups, "acme-sre") || !contains(u.Groups, "system:authenticated") {
		t.Fatalf("dana is %+v", u)
	}

	// Her first request recorded her as a User, with her e-mail.
	eventually(t, "dana recorded as a User", func() error {
		u, err := m.dynamic(t).Resource(usersGVR).Get(ctx, users.ObjectName("dana@example.com"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if email, _, _ := unstructured.NestedString(u.Object, "spec", "email"); email != "dana@example.com" || u.GetAnnotations()[users.UsernameAnnotation] != "dana@example.com" {
			return fmt.Errorf("user %v", u.Object)
		}
		return nil
	})

	// Platform RBAC on an OIDC group: the group may create organizations.
	platform := m.kube(t)
	if _, err := platform.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "oidc-organization-creator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"resourcemanager.miloapis.com"}, Resources: []string{"organizations"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := platform.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oidc-organization-creators"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "oidc-organization-creator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "acme-sre"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	danaPlatform := m.tokenKubeconfig(t, dana, "")
	eventuallyKubectl(t, m, danaPlatform, "apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Organization\nmetadata: {name: oidc-org}\n", "create", "-f", "-")

	// The creator owns it: she creates a project through the organization's context.
	danaOrg := m.tokenKubeconfig(t, dana, tenancy.OrganizationPath("oidc-org"))
	eventuallyKubectl(t, m, danaOrg, "apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Project\nmetadata: {name: oidc-web}\nspec: {ownerRef: {kind: Organization, name: oidc-org}}\n", "create", "-f", "-")
	m.waitProjectReady(t, "oidc-web")
	danaWeb := m.tokenKubeconfig(t, dana, tenancy.ProjectPath("oidc-web"))
	if r := m.kubectlWith(t, danaWeb, "", "create", "configmap", "settings", "--from-literal=a=b"); r.err != nil {
		t.Fatalf("owner writes in her project: %v %s", r.err, r.stderr)
	}

	// An IAM binding for an OIDC group (no namespace: the token's group).
	erinWeb := m.tokenKubeconfig(t, erin, tenancy.ProjectPath("oidc-web"))
	if r := m.kubectlWith(t, erinWeb, "", "get", "configmap", "settings"); r.err == nil || !strings.Contains(r.stderr, "Forbidden") {
		t.Fatalf("erin before her group's binding: %v %s", r.err, r.stderr)
	}
	binding := `apiVersion: iam.miloapis.com/v1alpha1
kind: PolicyBinding
metadata: {name: oidc-viewers, namespace: organization-oidc-org}
spec:
  roleRef: {name: viewer, namespace: milo-system}
  subjects: [{kind: Group, name: oidc-viewers}]
  resourceSelector: {resourceRef: {apiGroup: resourcemanager.miloapis.com, kind: Organization, name: oidc-org}}
`
	eventuallyKubectl(t, m, danaOrg, binding, "create", "-f", "-")
	eventually(t, "erin reads through her group", func() error {
		if r := m.kubectlWith(t, erinWeb, "", "get", "configmap", "settings"); r.err != nil {
			return fmt.Errorf("%v %s", r.err, r.stderr)
		}
		return nil
	})
	if r := m.kubectlWith(t, erinWeb, "", "delete", "configmap", "settings"); r.err == nil || !strings.Contains(r.stderr, "Forbidden") {
		t.Fatalf("a viewer deletes: %v %s", r.err, r.stderr)
	}

	// Tokens the API server must not accept.
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]idToken{
		"signed with another key": {email: "dana@example.com", signKey: otherKey},
		"expired": {email: "dana@example.com", adjust: func(c *jwt.Claims, _ map[string]any) {
			c.IssuedAt, c.Expiry = jwt.NewNumericDate(time.Now().Add(-2*time.Hour)), jwt.NewNumericDate(time.Now().Add(-time.Hour))
		}},
		"for another client":  {email: "dana@example.com", adjust: func(c *jwt.Claims, _ map[string]any) { c.Audience = jwt.Audience{"someone-else"} }},
		"from another issuer": {email: "dana@example.com", adjust: func(c *jwt.Claims, _ map[string]any) { c.Issuer = "https://login.example.com" }},
		"e-mail not verified": {email: "dana@example.com", adjust: func(_ *jwt.Claims, x map[string]any) { x["email_verified"] = false }},
	} {
		_, err := m.as(t, iss.sign(t, tok), tenancy.ProjectPath("oidc-web")).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("a token %s: %v, want Unauthorized", name, err)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// eventuallyKubectl runs kubectl until it succeeds: grants reach the
// authorizers' caches within moments.
func eventuallyKubectl(t *testing.T, m *milo, kubeconfig, stdin string, args ...string) {
	t.Helper()
	eventually(t, "kubectl "+strings.Join(args, " "), func() error {
		if r := m.kubectlWith(t, kubeconfig, stdin, args...); r.err != nil {
			return fmt.Errorf("%v: %s", r.err, r.stderr)
		}
		return nil
	})
}
