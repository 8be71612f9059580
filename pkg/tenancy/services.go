package tenancy

import (
	"context"
	"encoding/json"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// ServicesGroup is the API group of the service catalog (package catalog).
const ServicesGroup = "services.miloapis.com"

// Catalog is the resource of the Services providers register: written at
// the platform, read in projects and organization contexts as the catalog
// of what a consumer may enable.
var Catalog = schema.GroupResource{Group: ServicesGroup, Resource: "services"}

// Activations is the resource by which a project enables a Service.
var Activations = schema.GroupResource{Group: ServicesGroup, Resource: "serviceactivations"}

// ServiceGates tells where the resources that Services list are served: in
// the projects that enabled the service, in organization contexts, or at
// the platform only. A resource no Service lists is served everywhere, as
// before. Every answer is a lookup in memory, never a read.
type ServiceGates interface {
	// Synced reports whether the gates are known: until then the server
	// cannot tell which resources they hide.
	Synced() bool
	// Served reports whether gr is served to t: one project (by its
	// storage id), an organization's context, or the all-projects view (for
	// which a project resource is served, each project's objects shown as
	// its project enabled the service).
	Served(t Tenant, gr schema.GroupResource) bool
	// GroupHidden reports whether no resource of group is served to t
	// because Services hide every one of them.
	GroupHidden(t Tenant, group string) bool
	// GroupView names which of group's resources Services serve to t,
	// the same text for the same answer ("" when Services gate none of
	// them): what a document of the group shown to t depends on.
	GroupView(t Tenant, group string) string
	// Listed reports whether the named Service is in the catalog consumers
	// see (Published or Deprecated).
	Listed(name string) bool
	// ListedSelector is the label selector that keeps a list or watch of
	// Services to those Listed reports.
	ListedSelector() string
	// Watch returns a context that ends when the project (by storage id)
	// stops being served gr, for a watch of gr there, and a function to
	// call when the watch ends; with no project, when the all-projects
	// view stops being served gr.
	Watch(ctx context.Context, projectID string, gr schema.GroupResource) (context.Context, func())
}

// CheckServices is the filter behind CheckExistence: once the tenant is
// confirmed, it answers, as for a resource the server does not serve, a
// request for a resource the tenant's Services hide from it, and serves the
// catalog (Services) in project and organization contexts from the
// platform's objects, those consumers may see only. The server's
// superusers (its own controllers) see every resource everywhere.
func (r *Router) CheckServices(handler http.Handler) http.Handler {
	if r.Services == nil {
		return handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		t := From(ctx)
		info, ok := request.RequestInfoFrom(ctx)
		if t.Kind == Platform || !ok || !info.IsResourceRequest {
			handler.ServeHTTP(w, req)
			return
		}
		gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
		catalog, su := gr == Catalog && (t.Kind == Project || t.Kind == Organization), Superuser(ctx)
		if catalog {
			// The catalog is the platform's: read from its keys, and by
			// consumers only what they may enable.
			if !su {
				if !r.Services.Synced() {
					serviceUnavailable(w, req, r.Serializer)
					return
				}
				if info.Verb == "get" && !r.Services.Listed(info.Name) {
					responsewriters.ErrorNegotiated(apierrors.NewNotFound(Catalog, info.Name), r.Serializer, schema.GroupVersion{}, w, req)
					return
				}
				if info.Verb == "list" || info.Verb == "watch" {
					req = withLabelRequirement(req, r.Services.ListedSelector())
				}
			}
			handler.ServeHTTP(w, req.WithContext(WithTenant(req.Context(), PlatformTenant)))
			return
		}
		if su {
			handler.ServeHTTP(w, req)
			return
		}
		if !r.Services.Synced() {
			serviceUnavailable(w, req, r.Serializer)
			return
		}
		if !r.Services.Served(t, gr) {
			notServed(w, req)
			return
		}
		if (t.Kind == Project || t.Kind == AllProjects) && info.Verb == "watch" {
			// A project's watch ends when the project disables the
			// service; one of the all-projects view when the resource is
			// no longer served there (a project's enablement coming or
			// going is replayed into it: package tenantstorage).
			ctx, done := r.Services.Watch(ctx, t.ID, gr)
			defer done()
			req = req.WithContext(ctx)
		}
		handler.ServeHTTP(w, req)
	})
}

// serviceUnavailable answers that the catalog is not loaded yet; clients retry.
func serviceUnavailable(w http.ResponseWriter, req *http.Request, serializer runtime.NegotiatedSerializer) {
	w.Header().Set("Retry-After", "1")
	responsewriters.ErrorNegotiated(catalogLoadingError(), serializer, schema.GroupVersion{}, w, req)
}

func catalogLoadingError() *apierrors.StatusError {
	err := apierrors.NewServiceUnavailable("the service catalog is loading; retry in a moment")
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return err
}

// catalogLoading is serviceUnavailable for a discovery document, whose
// request asked for JSON (serveFilteredDiscovery).
func catalogLoading(w http.ResponseWriter) {
	status := catalogLoadingError().ErrStatus
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	body, _ := json.Marshal(status)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(body) //nolint:errcheck // the client went away
}

// catalogRead reports whether a request in a project or organization
// context is one the catalog serves there: get, list or watch of Services.
func catalogRead(info *request.RequestInfo) bool {
	return info.Verb == "get" || info.Verb == "list" || info.Verb == "watch"
}
