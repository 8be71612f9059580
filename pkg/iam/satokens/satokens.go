// Package satokens makes service account tokens belong to one tenant.
//
// Service accounts live in a project's own storage, and two projects may both
// have a service account default/ci, with the same user name
// system:serviceaccount:default:ci. A token therefore has to say which project
// issued it — to Milo and to anyone outside who verifies it — and must only be
// accepted there:
//
//   - each project is an issuer of its own, as each Kubernetes cluster is:
//     Generator signs a project's tokens with the issuer ProjectIssuer (the
//     server's issuer followed by the project's URL prefix) and adds the claims
//     milo.miloapis.com/project and milo.miloapis.com/project-id (the name and
//     the never-reused storage id); platform tokens keep the server's issuer
//     and have neither claim;
//   - Discovery serves each project's OpenID Connect discovery documents
//     under the project's URL prefix, for verifiers outside Milo;
//   - Authenticator, around the whole authentication chain, verifies a token
//     claiming a project itself, against that project's issuer and service
//     accounts, and only in requests to that very project (same name, same
//     storage id); a platform token (no claim) is left to the apiserver's
//     authenticators and refused in projects.
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

	"gopkg.in/go-jose/go-jose.v2/jwt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	k8sserviceaccount "k8s.io/kubernetes/pkg/serviceaccount"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/tenantstate"
)

// Claims a project's tokens carry besides Kubernetes' own.
const (
	// ProjectClaim names the project that issued a token.
	ProjectClaim = "milo.miloapis.com/project"
	// ProjectIDClaim is the storage id of that project (see tenancy.ProjectID):
	// a project created later with the same name has another one.
	ProjectIDClaim = "milo.miloapis.com/project-id"
)

// claimPrefixJSON starts both claims as they appear in a token's payload,
// which is all a token has to contain to be read as a project's.
var claimPrefixJSON = []byte(`"` + ProjectClaim)

// ProjectIssuer is the issuer of a project's tokens: the server's issuer
// followed by the project's URL prefix, where the project serves its OpenID
// Connect discovery documents.
func ProjectIssuer(serverIssuer, project string) string {
	return strings.TrimSuffix(serverIssuer, "/") + tenancy.ProjectPath(project)
}

// Generator issues platform tokens through Inner and a project's tokens as
// the project's issuer.
type Generator struct {
	Inner k8sserviceaccount.TokenGenerator
	// Issuer is the server's issuer (the first --service-account-issuer),
	// which Inner signs as.
	Issuer string
	// Key is the server's signing key (--service-account-signing-key-file).
	// Without one — an external signer signs as the server's issuer only —
	// projects issue no tokens, rather than tokens of the platform's issuer.
	Key any
}

// GenerateToken implements serviceaccount.TokenGenerator.
func (g Generator) GenerateToken(ctx context.Context, claims *jwt.Claims, privateClaims interface{}) (string, error) {
	t := tenancy.From(ctx)
	if !t.IsProject() {
		return g.Inner.GenerateToken(ctx, claims, privateClaims)
	}
	if g.Key == nil {
		return "", errors.New("service account tokens of projects need the server's signing key (--service-account-signing-key-file): an external signer cannot sign as a project's issuer")
	}
	if t.ID == "" {
		// Never issue a token that a later project of the same name could accept.
		return "", fmt.Errorf("project %s is not resolved yet", t.Name)
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
	merged[ProjectIDClaim] = t.ID
	// The upstream generator signs as one fixed issuer; one for this project
	// costs less than the signature it makes.
	signer, err := k8sserviceaccount.JWTTokenGenerator(ProjectIssuer(g.Issuer, t.Name), g.Key)
	if err != nil {
		return "", err
	}
	return signer.GenerateToken(ctx, claims, merged)
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
	tenant *tenantstate.Reader
}

// projectGet reads from the watch cache: lookups happen on every request of
// a project's service account.
func (g projectGetter) get(ctx context.Context, gr schema.GroupResource, namespace, name string, out runtime.Object) error {
	obj, err := g.tenant.Get(ctx, gr, namespace, name, tenantstate.FromCache)
	if err != nil {
		return err
	}
	return legacyscheme.Scheme.Convert(obj, out, nil)
}

func (g projectGetter) GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	out := &corev1.ServiceAccount{}
	return out, g.get(ctx, corev1.Resource("serviceaccounts"), namespace, name, out)
}

func (g projectGetter) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	return out, g.get(ctx, corev1.Resource("secrets"), namespace, name, out)
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
	// Issuers are the server's issuers (--service-account-issuer); a project's
	// tokens must come from the ProjectIssuer of one of them.
	Issuers []string
	Keys    k8sserviceaccount.PublicKeysGetter
	// Audiences are the server's API audiences: a token is accepted only if
	// it names one of them, so that a token made for someone else (kubectl
	// create token --audience) cannot be replayed against Milo.
	Audiences authenticator.Audiences
}

func (v Verifier) projectIssuers(project string) []string {
	out := make([]string, len(v.Issuers))
	for i, iss := range v.Issuers {
		out[i] = ProjectIssuer(iss, project)
	}
	return out
}

// Authenticator wraps the server's request authenticator.
//
// A token carrying a project claim is verified here, with the request's
// context, against the issuer and service accounts of the request's project —
// and only if that is the project that issued it: the same name and the same
// storage id. The apiserver's own token authenticators cannot do this: they
// cache results by token and look service accounts up without the request's
// context.
//
// Every other request goes to inner; a service account identity it returns
// must then come from a platform token, and is refused in projects.
func Authenticator(inner authenticator.Request, tenant *tenantstate.Reader, v Verifier) authenticator.Request {
	validator := k8sserviceaccount.NewValidator(projectGetter{tenant: tenant})
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		t := tenancy.From(req.Context())
		want := ""
		if t.IsProject() {
			want = t.Name
		}
		token, fromHeader := bearerToken(req)
		got, claimed := projectOfToken(token)
		if claimed {
			switch {
			case got.name != want:
				return nil, false, fmt.Errorf("service account token of project %s is not valid here (%s)", got.name, t)
			case t.ID == "":
				// Its service accounts cannot be read either.
				return nil, false, fmt.Errorf("project %s is not resolved yet", want)
			case got.id != t.ID:
				return nil, false, fmt.Errorf("service account token of an earlier project named %s is not valid for this one", want)
			case !fromHeader:
				return nil, false, errors.New("project service account tokens are accepted in the Authorization header only")
			case v.Keys == nil:
				return nil, false, errors.New("the server has no service account keys")
			}
			// Built for each request: the issuers are the project's. The
			// claims read above without verifying are the ones it verifies.
			verify := k8sserviceaccount.JWTTokenAuthenticator(v.projectIssuers(want), v.Keys, v.Audiences, validator)
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
			return nil, false, fmt.Errorf("service account token of the platform is not valid here (%s)", t)
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

// tokenProject is what a token says of the project that issued it.
type tokenProject struct{ name, id string }

// invalidProject stands for a malformed claim, which must not read as "the
// platform": no project has this name.
const invalidProject = "(invalid)"

// projectOfToken reads the project claims of a bearer token, without
// verifying them, and reports whether it has any: a token claiming a project
// is verified against that project only. A token that is not a JWT (a static
// token) has no project.
func projectOfToken(token string) (tokenProject, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return tokenProject{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || !bytes.Contains(payload, claimPrefixJSON) {
		// Most bearer tokens (OIDC, platform service accounts) end here,
		// without a JSON decode on every request.
		return tokenProject{}, false
	}
	var claims map[string]json.RawMessage
	if json.Unmarshal(payload, &claims) != nil {
		return tokenProject{}, false
	}
	rawName, hasName := claims[ProjectClaim]
	rawID, hasID := claims[ProjectIDClaim]
	if !hasName && !hasID {
		return tokenProject{}, false
	}
	var p tokenProject
	if json.Unmarshal(rawName, &p.name) != nil || p.name == "" || json.Unmarshal(rawID, &p.id) != nil {
		return tokenProject{name: invalidProject}, true
	}
	return p, true
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
