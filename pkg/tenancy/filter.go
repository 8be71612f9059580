package tenancy

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// ProjectState is what the router needs to know of a project.
type ProjectState int

// Project states.
const (
	ProjectMissing ProjectState = iota
	ProjectActive
	// ProjectInitializing is a project whose control plane is not bootstrapped
	// yet: only platform superusers (the controllers bootstrapping it) are served.
	ProjectInitializing
	// ProjectDeleting refuses new objects while the project is emptied.
	ProjectDeleting
)

// ProjectInfo is what the router learns of a project.
type ProjectInfo struct {
	State ProjectState
	// ID is the project's storage id (see ProjectID).
	ID string
}

// ProjectLookup tells whether a project exists. It is served from one shared
// cache of Project objects, never from anything per project.
type ProjectLookup interface {
	// Project reports whether the named Project exists, is being deleted, and
	// its storage id: from the cache, or for a project created a moment ago
	// from a live read.
	Project(ctx context.Context, name string) (ProjectInfo, error)
	// CachedProjectID returns the storage id of the named project if the cache
	// has it, without reading further.
	CachedProjectID(name string) string
}

// Router is the outermost handler-chain filter: it recognises the project,
// all-projects and organization URLs, checks the request is allowed there,
// strips the prefix and puts the tenant into the request context, so that every
// filter after it (request info, authentication, audit, authorization) and every
// handler sees an ordinary Kubernetes request for one tenant.
type Router struct {
	// Projects answers whether a project exists.
	Projects ProjectLookup
	// Hierarchy answers questions about organizations, folders and projects.
	Hierarchy HierarchyLookup
	// RequestInfo parses the stripped request, as the handler chain will.
	RequestInfo request.RequestInfoResolver
	// Serializer encodes Status errors.
	Serializer runtime.NegotiatedSerializer
	// Lifetimes ends the requests of deleted tenants; nil ends none.
	Lifetimes *Lifetimes
	// Watches bounds the watches each tenant holds open; nil bounds none.
	Watches *WatchLimit
	// ProjectCRDs serves CustomResourceDefinitions in projects: each project
	// defines its own (docs/project-crds.md).
	ProjectCRDs bool
	// ProjectAPIs lists the groups projects define for themselves in their
	// discovery; nil lists none.
	ProjectAPIs ProjectAPIs
	// Services hides the resources Services list from the tenants they are
	// not served to (CheckServices, discovery); nil hides none.
	Services ServiceGates
	// Contextualize, if set, adds to a routed request's context (which holds
	// its tenant) what telemetry wants there: a logger naming the tenant.
	Contextualize func(context.Context) context.Context
	// Requests, if set, counts each request CheckExistence confirms for an
	// existing project (telemetry's heaviest tenants).
	Requests interface{ Count(project string) }
	// Budget, if set, charges each project and organization context for
	// the time its requests take, and refuses a tenant's requests while it
	// has spent its share (docs/fairness.md).
	Budget Budget
	// Seats, if set, bound how many requests of one project or organization
	// context run at once.
	Seats Seats
	// Turns, if set, bound how many of one tenant's watches write an event
	// at once: the others wait their turn (docs/fairness.md).
	Turns Turns
	// LongRunning tells the requests (watches) that hold no seat and are
	// charged only their writes, as the server's handler chain tells them.
	LongRunning request.LongRunningRequestCheck
}

// Wrap returns handler behind the router.
func (r *Router) Wrap(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p := parsePath(req.URL.Path)
		view := Platform.View()
		if p.matched {
			view = p.tenant.Kind.View()
		}
		outcome := outcomeServed // unless route says otherwise: a handler's panic unwinds through here
		defer func() { routed.WithLabelValues(view, outcome).Inc() }()
		outcome = r.route(handler, w, req, p)
	})
}

// route answers a request the router refuses, or hands it to handler, and
// says which it did.
func (r *Router) route(handler http.Handler, w http.ResponseWriter, req *http.Request, p parsed) string {
	if !p.matched {
		handler.ServeHTTP(w, req)
		return outcomeServed
	}
	if err := checkImpersonation(req.Header, p.tenant); err != nil {
		responsewriters.ErrorNegotiated(apierrors.NewForbidden(schema.GroupResource{}, "", err), r.Serializer, schema.GroupVersion{}, w, req)
		return outcomeForbidden
	}
	tenant := p.tenant
	if tenant.IsProject() {
		if !ValidProjectName(tenant.Name) {
			responsewriters.ErrorNegotiated(apierrors.NewNotFound(projectsResource, tenant.Name), r.Serializer, schema.GroupVersion{}, w, req)
			return outcomeNotFound
		}
		// Authorization reads the project's own RBAC, so the project's
		// storage is resolved now, from the cache only: resolving a missing
		// name must cost an unauthenticated client nothing. CheckExistence
		// resolves what the cache did not know yet, and refuses a request
		// whose project was replaced in between.
		tenant.ID = r.Projects.CachedProjectID(tenant.Name)
	}
	ctx := WithTenant(req.Context(), tenant)
	if r.Contextualize != nil {
		ctx = r.Contextualize(ctx)
	}

	inner := req.Clone(ctx)
	inner.URL.Path = p.rest
	inner.URL.RawPath = ""
	inner.RequestURI = inner.URL.RequestURI()

	info, err := r.RequestInfo.NewRequestInfo(inner)
	if err != nil {
		responsewriters.ErrorNegotiated(apierrors.NewBadRequest(err.Error()), r.Serializer, schema.GroupVersion{}, w, req)
		return outcomeBadRequest
	}
	if p.tenant.Kind == Organization {
		answered := &statusOf{ResponseWriter: w}
		if inner = r.routeOrganization(answered, inner, info, p.org); inner == nil {
			return outcomeOf(answered.status)
		}
		if !info.IsResourceRequest && isDiscoveryPath(inner.URL.Path) {
			// What the organization's context serves, once the chain
			// has confirmed it: its own and namespaced resources, what
			// its Services serve there.
			v := visibility{org: true}
			if v.hiddenDiscoveryPath(inner.URL.Path) {
				notServed(w, req)
				return outcomeNotFound
			}
			confirmed := &confirmedTenant{}
			inner = inner.WithContext(context.WithValue(inner.Context(), confirmedTenantKey{}, confirmed))
			serveFilteredDiscovery(handler, w, inner, v, func() (visibility, ownGroups) {
				v := v
				if confirmed.ok && r.Services != nil && !confirmed.superuser {
					v.gates, v.tenant = r.Services, confirmed.tenant
				}
				return v, ownGroups{}
			})
			return outcomeServed
		}
		handler.ServeHTTP(w, inner)
		return outcomeServed
	}

	if !info.IsResourceRequest && !servedInTenants(inner.URL.Path) {
		notServed(w, req)
		return outcomeNotFound
	}
	if tenant.IsProject() && (info.IsResourceRequest || !ProcessWide(inner.URL.Path)) {
		inner = inner.WithContext(withExistenceCheck(inner.Context(), existenceCheck{project: tenant.Name}))
	}
	// A project's context serves what the project may define for
	// itself; the all-projects view always lists projects' CRDs (none
	// when projects define none), so that the controllers need not know
	// the server's flags.
	v := visibility{projectCRDs: r.ProjectCRDs || p.tenant.Kind == AllProjects}
	if info.IsResourceRequest && v.platformOnly(schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}) {
		// The same answer as for a resource the server does not know at all.
		notServed(w, req)
		return outcomeNotFound
	}
	if info.IsResourceRequest && info.APIGroup == Catalog.Group && info.Resource == Catalog.Resource {
		// Services are the platform's: a project reads them as the catalog.
		if p.tenant.Kind == AllProjects {
			notServed(w, req)
			return outcomeNotFound
		}
		if !catalogRead(info) {
			responsewriters.ErrorNegotiated(apierrors.NewMethodNotSupported(Catalog, info.Verb), r.Serializer, schema.GroupVersion{}, w, req)
			return outcomeMethodNotAllowed
		}
	}
	if p.tenant.Kind == AllProjects && !readOnlyAcrossProjects(info) {
		responsewriters.ErrorNegotiated(apierrors.NewMethodNotSupported(schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}, info.Verb),
			r.Serializer, schema.GroupVersion{}, w, req)
		return outcomeMethodNotAllowed
	}
	if p.tenant.Kind == AllProjects && info.IsResourceRequest && info.Namespace != "" {
		responsewriters.ErrorNegotiated(apierrors.NewBadRequest("the all-projects view lists and watches across all namespaces only; select a namespace with a field selector on metadata.namespace"),
			r.Serializer, schema.GroupVersion{}, w, req)
		return outcomeBadRequest
	}
	if !info.IsResourceRequest && isDiscoveryPath(inner.URL.Path) {
		if v.hiddenDiscoveryPath(inner.URL.Path) {
			notServed(w, req)
			return outcomeNotFound
		}
		// The project's own groups are added, and what its Services
		// hide from it removed, once the chain has authenticated and
		// authorized the request and confirmed the project:
		// CheckExistence records the tenant it confirmed.
		confirmed := &confirmedTenant{}
		inner = inner.WithContext(context.WithValue(inner.Context(), confirmedTenantKey{}, confirmed))
		view := func() (visibility, ownGroups) {
			if !confirmed.ok {
				return v, ownGroups{}
			}
			v := v
			if r.Services != nil && !confirmed.superuser {
				v.gates, v.tenant = r.Services, confirmed.tenant
			}
			if !confirmed.tenant.IsProject() || confirmed.tenant.ID == "" || r.ProjectAPIs == nil {
				return v, ownGroups{}
			}
			return v, ownGroups{groups: r.ProjectAPIs.Groups(confirmed.tenant.ID), apis: r.ProjectAPIs, projectID: confirmed.tenant.ID}
		}
		serveFilteredDiscovery(handler, w, inner, v, view)
		return outcomeServed
	}
	handler.ServeHTTP(w, inner)
	return outcomeServed
}

// existenceCheck is what the router leaves for CheckExistence to verify once the
// request is authenticated and authorized, so that nobody learns whether a
// project or organization exists from an answer they were not entitled to.
type existenceCheck struct {
	project string
	org     string
	// orgObject, with org, requires that the Folder or Project belongs to org.
	orgObject *schema.GroupResource
	name      string
}

type existenceCheckKey struct{}

// ExpectedProjectIDHeader, on a request to a project, names the storage id of
// the project it is meant for. Controllers send it with work queued for one
// project, so that work queued before a project was deleted never lands in a
// later project of the same name: such a request answers 404.
const ExpectedProjectIDHeader = "X-Milo-Project-Id"

type deletingKey struct{}

// ProjectDeletingFrom reports whether the request in ctx is for a project that
// is being deleted, in which nothing new may be created, whatever the verb
// (POST, PUT creating on update, server-side apply creating).
func ProjectDeletingFrom(ctx context.Context) bool {
	deleting, _ := ctx.Value(deletingKey{}).(bool)
	return deleting
}

func withExistenceCheck(ctx context.Context, c existenceCheck) context.Context {
	return context.WithValue(ctx, existenceCheckKey{}, c)
}

// Audit annotations naming the tenant of a request.
const (
	AuditProject      = "tenancy.miloapis.com/project"
	AuditOrganization = "tenancy.miloapis.com/organization"
)

// AnnotateAudit records the request's project or organization in its audit event.
func AnnotateAudit(ctx context.Context) {
	switch t := From(ctx); t.Kind {
	case Project:
		audit.AddAuditAnnotation(ctx, AuditProject, t.Name)
	case AllProjects:
		audit.AddAuditAnnotation(ctx, AuditProject, "*")
	case Organization:
		audit.AddAuditAnnotation(ctx, AuditOrganization, t.Name)
	}
}

// CheckExistence is the innermost filter of the handler chain, after
// authentication and authorization: it answers 404 for requests to a project or
// organization that does not exist, or to a Folder or Project of another
// organization, as the router asked it to. It also names the tenant in the
// request's audit event.
func (r *Router) CheckExistence(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		AnnotateAudit(req.Context())
		c, ok := req.Context().Value(existenceCheckKey{}).(existenceCheck)
		if !ok {
			// Nothing to check (the all-projects view): the tenant is
			// confirmed as it is.
			if c, ok := req.Context().Value(confirmedTenantKey{}).(*confirmedTenant); ok {
				*c = confirmedTenant{ok: true, tenant: From(req.Context()), superuser: Superuser(req.Context())}
			}
			handler.ServeHTTP(w, req)
			return
		}
		fail := func(err error) {
			responsewriters.ErrorNegotiated(err, r.Serializer, schema.GroupVersion{}, w, req)
		}
		unavailable := func(what string, err error) {
			fail(apierrors.NewServiceUnavailable(fmt.Sprintf("cannot tell whether %s exists yet: %v", what, err)))
		}
		ctx := req.Context()
		switch {
		case c.project != "":
			// Registered before the lookup: a project deleted after it ends the request.
			var end func()
			ctx, end = r.Lifetimes.Begin(ctx, ProjectTenant(c.project))
			defer end()
			project, err := r.Projects.Project(ctx, c.project)
			if err != nil {
				unavailable("project "+c.project, err)
				return
			}
			state := project.State
			expected := req.Header.Get(ExpectedProjectIDHeader)
			if resolved := From(ctx).ID; state == ProjectMissing || (resolved != "" && resolved != project.ID) || (expected != "" && expected != project.ID) {
				// Missing, or deleted and created again while this request was
				// authorized against the old one's RBAC.
				fail(apierrors.NewNotFound(projectsResource, c.project))
				return
			}
			ctx = WithTenant(ctx, Tenant{Kind: Project, Name: c.project, ID: project.ID})
			if r.Requests != nil {
				r.Requests.Count(c.project)
			}
			if state == ProjectDeleting {
				ctx = context.WithValue(ctx, deletingKey{}, true)
			}
			req = req.WithContext(ctx)
			if state == ProjectInitializing && !Superuser(ctx) {
				if info, ok := request.RequestInfoFrom(ctx); ok && info.IsResourceRequest {
					// 503 with Retry-After: client-go and kubectl wait and retry by themselves.
					err := apierrors.NewServiceUnavailable(fmt.Sprintf("project %s is initializing; retry in a moment", c.project))
					err.ErrStatus.Details = &metav1.StatusDetails{Name: c.project, Group: projectsResource.Group, Kind: "projects", RetryAfterSeconds: 1}
					w.Header().Set("Retry-After", "1")
					fail(err)
					return
				}
			}
			if info, ok := request.RequestInfoFrom(ctx); state == ProjectDeleting && ok && info.Verb == "create" {
				fail(apierrors.NewForbidden(schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}, info.Name,
					fmt.Errorf("project %s is being deleted", c.project)))
				return
			}
		case c.org != "":
			var end func()
			ctx, end = r.Lifetimes.Begin(ctx, OrganizationTenant(c.org))
			defer end()
			req = req.WithContext(ctx)
			exists, err := r.Hierarchy.OrganizationExists(ctx, c.org)
			if err != nil {
				unavailable("organization "+c.org, err)
				return
			}
			if !exists {
				fail(apierrors.NewNotFound(organizationsResource, c.org))
				return
			}
			if c.orgObject != nil {
				owner, found, err := r.Hierarchy.OrganizationOf(ctx, *c.orgObject, c.name)
				if err != nil {
					fail(apierrors.NewInternalError(err))
					return
				}
				if !found || owner != c.org {
					fail(apierrors.NewNotFound(*c.orgObject, c.name))
					return
				}
			}
		}
		if t := From(ctx); (t.Kind == Project || t.Kind == Organization) && !Superuser(ctx) {
			info, _ := request.RequestInfoFrom(ctx)
			watch := info != nil && info.Verb == "watch"
			var served func()
			var ok bool
			if w, served, ok = r.admit(ctx, w, req, t, info, fail); !ok {
				return
			}
			defer served()
			if watch {
				release, ok := r.Watches.Acquire(t)
				if !ok {
					// 429 with Retry-After: client-go's reflectors back off and
					// try again; the tenant is told what bounds it.
					err := apierrors.NewTooManyRequests(fmt.Sprintf("%s holds %d watches open, the most one tenant may hold at once: close some, or retry later",
						describe(t), r.Watches.Max()), 5)
					w.Header().Set("Retry-After", "5")
					fail(err)
					return
				}
				defer release()
			}
		}
		if c, ok := ctx.Value(confirmedTenantKey{}).(*confirmedTenant); ok {
			*c = confirmedTenant{ok: true, tenant: From(ctx), superuser: Superuser(ctx)}
		}
		handler.ServeHTTP(w, req)
	})
}

// confirmedTenantKey holds, for a discovery request the router rewrites, the
// tenant CheckExistence confirmed: set only once the request has passed
// authentication, authorization and the existence check.
type confirmedTenantKey struct{}

type confirmedTenant struct {
	ok        bool
	tenant    Tenant
	superuser bool
}

// readOnlyAcrossProjects allows list and watch of resources, and the GETs of
// discovery and OpenAPI documents, in the all-projects view.
func readOnlyAcrossProjects(info *request.RequestInfo) bool {
	if !info.IsResourceRequest {
		return info.Verb == "get"
	}
	return info.Verb == "list" || info.Verb == "watch"
}

// Superuser reports whether the request comes from a platform superuser
// (group system:masters), such as the server's own controllers.
func Superuser(ctx context.Context) bool {
	u, ok := request.UserFrom(ctx)
	return ok && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}
