package satokens

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/klog/v2"
	k8sserviceaccount "k8s.io/kubernetes/pkg/serviceaccount"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Discovery serves the OpenID Connect discovery documents of each project's
// issuer, at {project prefix}/.well-known/openid-configuration and
// {project prefix}/openid/v1/jwks, as a Kubernetes cluster serves its own.
//
// One key signs the tokens of every project and of the platform, so every
// project's key set is the server's. The documents are rendered by
// Kubernetes' own provider, which follows the server's keys; a project's
// configuration is the server's with the project's issuer and key set URL.
type Discovery struct {
	provider   k8sserviceaccount.OpenIDMetadataProvider
	issuer     string
	jwksURI    string
	serializer runtime.NegotiatedSerializer
}

// NewDiscovery returns the documents of the projects of a server with this
// issuer (the first --service-account-issuer), key set URL
// (--service-account-jwks-uri, may be empty) and public keys. When they make
// no valid discovery document (an issuer that is not an https URL, no keys),
// Kubernetes serves none for the server either, and projects serve none.
func NewDiscovery(issuer, jwksURI string, keys k8sserviceaccount.PublicKeysGetter, serializer runtime.NegotiatedSerializer) *Discovery {
	d := &Discovery{issuer: issuer, jwksURI: jwksURI, serializer: serializer}
	if keys == nil {
		return d
	}
	// Every project's document names its own key set URL; the provider needs
	// one only to render.
	platformJWKS := jwksURI
	if platformJWKS == "" {
		platformJWKS = strings.TrimSuffix(issuer, "/") + k8sserviceaccount.JWKSPath
	}
	provider, err := k8sserviceaccount.NewOpenIDMetadataProvider(issuer, platformJWKS, "", keys)
	if err != nil {
		klog.InfoS("Projects serve no service account issuer discovery", "err", err)
		return d
	}
	d.provider = provider
	return d
}

// Wrap returns handler with the documents served in project contexts. In the
// other tenant contexts they do not exist; at the platform, handler serves the
// server's own.
func (d *Discovery) Wrap(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !tenancy.IssuerDocument(req.URL.Path) {
			handler.ServeHTTP(w, req)
			return
		}
		t := tenancy.From(req.Context())
		switch {
		case t.Kind == tenancy.Platform:
			handler.ServeHTTP(w, req)
			return
		case !t.IsProject() || d.provider == nil:
			responsewriters.ErrorNegotiated(errPathNotFound, d.serializer, schema.GroupVersion{}, w, req)
			return
		case req.Method != http.MethodGet:
			w.Header().Set("Allow", http.MethodGet)
			responsewriters.ErrorNegotiated(apierrors.NewMethodNotSupported(schema.GroupResource{}, req.Method), d.serializer, schema.GroupVersion{}, w, req)
			return
		}
		var body []byte
		var maxAge int
		contentType := "application/json"
		if req.URL.Path == k8sserviceaccount.JWKSPath {
			body, maxAge = d.provider.GetKeysetJSON()
			contentType = "application/jwk-set+json"
		} else {
			var err error
			body, maxAge, err = d.projectConfiguration(t.Name)
			if err != nil {
				responsewriters.ErrorNegotiated(apierrors.NewInternalError(err), d.serializer, schema.GroupVersion{}, w, req)
				return
			}
		}
		w.Header().Set("Content-Type", contentType)
		// The documents name no one and change only with the server's keys;
		// the upstream endpoints let anyone cache them too.
		w.Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d", maxAge))
		_, _ = w.Write(body)
	})
}

// projectConfiguration is the server's discovery document with the project's
// issuer and key set URL: the rest (algorithms, response and subject types)
// stays what Kubernetes renders for the keys.
func (d *Discovery) projectConfiguration(project string) ([]byte, int, error) {
	platform, maxAge := d.provider.GetConfigJSON()
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(platform, &doc); err != nil {
		return nil, 0, err
	}
	issuer := ProjectIssuer(d.issuer, project)
	jwksURI := d.jwksURI
	if jwksURI == "" {
		jwksURI = issuer + k8sserviceaccount.JWKSPath
	}
	for field, value := range map[string]string{"issuer": issuer, "jwks_uri": jwksURI} {
		raw, err := json.Marshal(value)
		if err != nil {
			return nil, 0, err
		}
		doc[field] = raw
	}
	out, err := json.Marshal(doc)
	return out, maxAge, err
}

// errPathNotFound is the apiserver's answer for a path nothing serves.
var errPathNotFound = &apierrors.StatusError{ErrStatus: metav1.Status{
	Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
	Message: "the server could not find the requested resource",
}}

// DiscoveryAuthorizer lets the users of a project read its issuer's
// documents, as the platform's system:discovery lets them read its API
// discovery. It belongs after the authorizer of projects, which refuses
// whoever has no foothold in the project: so whoever it allows may learn that
// the project exists. The project's own service accounts are allowed anyway
// by Kubernetes' binding of system:service-account-issuer-discovery to every
// service account; anonymous readers, which verifiers outside often are, only
// if the project binds that role to system:unauthenticated in its own RBAC, as
// a cluster's operator would.
//
// In an organization's context and the all-projects view the documents do
// not exist: those allowed there learn that from a 404, as an administrator
// does, rather than from a refusal.
type DiscoveryAuthorizer struct{}

var _ authorizer.Authorizer = DiscoveryAuthorizer{}

// Authorize implements authorizer.Authorizer.
func (DiscoveryAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.IsResourceRequest() || a.GetVerb() != "get" || !tenancy.IssuerDocument(a.GetPath()) || tenancy.From(ctx).Kind == tenancy.Platform {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if u := a.GetUser(); u == nil || !slices.Contains(u.GetGroups(), user.AllAuthenticated) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	return authorizer.DecisionAllow, "a tenant's service account issuer documents", nil
}
