// Package satokens makes service account tokens belong to one tenant.
//
// Service accounts live in a project's own storage, and two projects may both
// have a service account default/ci, with the same user name
// system:serviceaccount:default:ci. A token therefore has to say which project
// issued it, and must only be accepted there:
//
//   - Generator adds the claim milo.miloapis.com/project to every token a
//     project's TokenRequest issues (platform tokens have none);
//   - Authenticator, around the whole authentication chain, verifies a token
//     claiming a project itself, against that project's service accounts, and
//     only in requests to that project; a platform token (no claim) is left to
//     the apiserver's authenticators and refused in projects.
package satokens

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"gopkg.in/go-jose/go-jose.v2/jwt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	k8sserviceaccount "k8s.io/kubernetes/pkg/serviceaccount"

	"go.miloapis.com/milo/pkg/tenancy"
)

// ProjectClaim is the JWT claim naming the project that issued a token.
const ProjectClaim = "milo.miloapis.com/project"

var projectClaimJSON = []byte(`"` + ProjectClaim + `"`)

// Generator issues tokens through inner, adding the project of the request.
type Generator struct {
	Inner k8sserviceaccount.TokenGenerator
}

// GenerateToken implements serviceaccount.TokenGenerator.
func (g Generator) GenerateToken(ctx context.Context, claims *jwt.Claims, privateClaims interface{}) (string, error) {
	t := tenancy.From(ctx)
	if !t.IsProject() {
		return g.Inner.GenerateToken(ctx, claims, privateClaims)
	}
	raw, err := json.Marshal(privateClaims)
	if err != nil {
		return "", err
	}
	merged := map[string]interface{}{}
	if err := json.Unmarshal(raw, &merged); err != nil {
		return "", err
	}
	merged[ProjectClaim] = t.Name
	return g.Inner.GenerateToken(ctx, claims, merged)
}

// Storage is what Getter reads a project's objects through: the server's
// service account and secret storages, set once they are built.
type Storage struct {
	serviceAccounts, secrets atomic.Pointer[rest.Getter]
}

// Set installs the storage of serviceaccounts or secrets.
func (s *Storage) Set(resource string, r rest.Storage) {
	g, ok := r.(rest.Getter)
	if !ok {
		return
	}
	switch resource {
	case "serviceaccounts":
		s.serviceAccounts.Store(&g)
	case "secrets":
		s.secrets.Store(&g)
	}
}

// PlatformGetter is the token getter of the apiserver's own authenticators,
// which see only platform tokens: it reads the server's shared informers.
func PlatformGetter(factory informers.SharedInformerFactory) k8sserviceaccount.ServiceAccountTokenGetter {
	return platformGetter{
		serviceAccounts: factory.Core().V1().ServiceAccounts().Lister(),
		secrets:         factory.Core().V1().Secrets().Lister(),
	}
}

type platformGetter struct {
	noPodsOrNodes
	serviceAccounts corelisters.ServiceAccountLister
	secrets         corelisters.SecretLister
}

func (g platformGetter) GetServiceAccount(_ context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return g.serviceAccounts.ServiceAccounts(namespace).Get(name)
}

func (g platformGetter) GetSecret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	return g.secrets.Secrets(namespace).Get(name)
}

// projectGetter reads the objects of the context's project from its storage.
type projectGetter struct {
	noPodsOrNodes
	storage *Storage
}

// fromCache serves lookups from the watch cache: they happen on every request
// of a project's service account.
var fromCache = &metav1.GetOptions{ResourceVersion: "0"}

func projectGet(ctx context.Context, p *atomic.Pointer[rest.Getter], namespace, name string, out runtime.Object) error {
	g := p.Load()
	if g == nil {
		return errors.New("service account storage is not ready")
	}
	obj, err := (*g).Get(genericapirequest.WithNamespace(ctx, namespace), name, fromCache)
	if err != nil {
		return err
	}
	return legacyscheme.Scheme.Convert(obj, out, nil)
}

func (g projectGetter) GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	out := &corev1.ServiceAccount{}
	return out, projectGet(ctx, &g.storage.serviceAccounts, namespace, name, out)
}

func (g projectGetter) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	return out, projectGet(ctx, &g.storage.secrets, namespace, name, out)
}

type noPodsOrNodes struct{}

// GetPod finds nothing: Milo serves no pods, so pod-bound tokens never validate.
func (noPodsOrNodes) GetPod(_ context.Context, _, name string) (*corev1.Pod, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

// GetNode finds nothing: Milo serves no nodes.
func (noPodsOrNodes) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
}

// Verifier is what checks a project's tokens: the issuers, keys and audiences
// of the server's service account authenticator.
type Verifier struct {
	Issuers   []string
	Keys      k8sserviceaccount.PublicKeysGetter
	Audiences authenticator.Audiences
}

// Authenticator wraps the server's request authenticator.
//
// A token carrying a project claim is verified here, with the request's
// context, against the service accounts of the request's project — and only
// if that is the project that issued it. The apiserver's own token
// authenticators cannot do this: they cache results by token and look service
// accounts up without the request's context.
//
// Every other request goes to inner; a service account identity it returns
// must then come from a platform token, and is refused in projects.
func Authenticator(inner authenticator.Request, storage *Storage, v Verifier) authenticator.Request {
	verify := k8sserviceaccount.JWTTokenAuthenticator(v.Issuers, v.Keys, v.Audiences,
		k8sserviceaccount.NewValidator(projectGetter{storage: storage}))
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		want := ""
		if t := tenancy.From(req.Context()); t.IsProject() {
			want = t.Name
		}
		token, fromHeader := bearerToken(req)
		got := projectOfToken(token)
		if got != "" {
			if got != want || !fromHeader || v.Keys == nil {
				return nil, false, fmt.Errorf("service account token of %s is not valid for %s", describe(got), describe(want))
			}
			resp, ok, err := verify.AuthenticateToken(req.Context(), token)
			if !ok || err != nil {
				if err == nil {
					err = errors.New("invalid service account token")
				}
				return nil, false, err
			}
			// As the apiserver's bearer token authenticator does: the token
			// goes no further, and the identity is authenticated.
			req.Header.Del("Authorization")
			resp.User = withAuthenticatedGroup(resp.User)
			return resp, true, nil
		}
		resp, ok, err := inner.AuthenticateRequest(req)
		if !ok || err != nil || resp == nil || resp.User == nil {
			return resp, ok, err
		}
		if want != "" && strings.HasPrefix(resp.User.GetName(), serviceaccount.ServiceAccountUsernamePrefix) {
			return nil, false, fmt.Errorf("service account token of the platform is not valid for %s", describe(want))
		}
		return resp, ok, err
	})
}

func withAuthenticatedGroup(u user.Info) user.Info {
	groups := u.GetGroups()
	for _, g := range groups {
		if g == user.AllAuthenticated {
			return u
		}
	}
	return &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: append(append([]string{}, groups...), user.AllAuthenticated), Extra: u.GetExtra()}
}

func describe(project string) string {
	if project == "" {
		return "the platform"
	}
	return "project " + project
}

// projectOfToken reads the project claim of a bearer token, without
// verifying it: a token claiming a project is verified against that project
// only. A token that is not a JWT (a static token) has no project.
func projectOfToken(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || !bytes.Contains(payload, projectClaimJSON) {
		// Most bearer tokens (OIDC, platform service accounts) end here,
		// without a JSON decode on every request.
		return ""
	}
	var claims map[string]json.RawMessage
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	raw, ok := claims[ProjectClaim]
	if !ok {
		return ""
	}
	var project string
	if json.Unmarshal(raw, &project) != nil || project == "" {
		// A malformed claim must not read as "the platform".
		return "(invalid)"
	}
	return project
}

// websocketTokenPrefix is how browsers pass a bearer token to a websocket
// (the apiserver's websocket protocol authenticator).
const websocketTokenPrefix = "base64url.bearer.authorization.k8s.io."

// bearerToken is the request's bearer token, and whether it came in the
// Authorization header (else a websocket protocol, or none).
func bearerToken(req *http.Request) (string, bool) {
	if auth := strings.TrimSpace(req.Header.Get("Authorization")); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:]), true
	}
	for _, header := range req.Header.Values("Sec-WebSocket-Protocol") {
		for _, protocol := range strings.Split(header, ",") {
			protocol = strings.TrimSpace(protocol)
			if encoded, ok := strings.CutPrefix(protocol, websocketTokenPrefix); ok {
				if token, err := base64.RawURLEncoding.DecodeString(encoded); err == nil {
					return string(token), false
				}
			}
		}
	}
	return "", false
}
