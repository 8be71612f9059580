package tenancy

import (
	"context"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// OrganizationLabel names, on Folders and Projects, the organization they belong to.
const OrganizationLabel = "resourcemanager.miloapis.com/organization-name"

// HierarchyLookup answers the questions the router asks about the hierarchy.
type HierarchyLookup interface {
	// OrganizationExists reports whether the named Organization exists.
	OrganizationExists(ctx context.Context, name string) (bool, error)
	// OrganizationOf returns the organization label of a Folder, Project or
	// ProjectSuspension, and whether the object exists.
	OrganizationOf(ctx context.Context, resource schema.GroupResource, name string) (string, bool, error)
}

var (
	organizationsResource = schema.GroupResource{Group: "resourcemanager.miloapis.com", Resource: "organizations"}
	projectsResource      = schema.GroupResource{Group: "resourcemanager.miloapis.com", Resource: "projects"}
	foldersResource       = schema.GroupResource{Group: "resourcemanager.miloapis.com", Resource: "folders"}
	namespacesResource    = schema.GroupResource{Resource: "namespaces"}
	// SuspensionsResource is the resource of ProjectSuspensions: the
	// platform's, read in an organization's context for its projects, and
	// lifted there (deleted) when the consumer may lift them.
	SuspensionsResource = schema.GroupResource{Group: "resourcemanager.miloapis.com", Resource: "projectsuspensions"}
	// reviews ask the server about access or identity in the organization's
	// context: they are answered there, and store nothing.
	reviews = map[schema.GroupResource]bool{
		{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}: true,
		{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"}:  true,
		{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}:     true,
		{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}:      true,
	}
)

// IsOrganizationScoped reports whether a cluster-scoped resource belongs to one
// organization through its organization label (Folders and Projects).
func IsOrganizationScoped(gr schema.GroupResource) bool {
	return gr == projectsResource || gr == foldersResource
}

// routeOrganization admits a request made in an organization's context (info
// is its request info), narrowing it to what the organization owns, or answers it with an error. It returns the
// request to serve, or nil when it has answered. Whether the organization exists,
// and which organization a Folder or Project belongs to, is checked after
// authorization (CheckExistence).
//
// What an organization's context serves:
//   - its own Organization (get);
//   - its namespace organization-{org} (get), and any namespaced object in it;
//     lists and watches across namespaces are narrowed to that namespace;
//   - Folders and Projects labelled with the organization: lists and watches get
//     the label selector added, single objects of another organization are not
//     found, and new ones are labelled by admission (TenantAnnotation);
//   - access and identity reviews (kubectl auth can-i, kubectl auth whoami),
//     answered for the organization;
//   - the catalog of Services consumers may enable (get, list, watch);
//   - the ProjectSuspensions of its projects, labelled with the organization
//     by admission: get, list and watch, and delete, which admission allows
//     for a suspension whose reinstateAuthority is Consumer.
//
// Everything else answers 404, as if it did not exist.
func (r *Router) routeOrganization(w http.ResponseWriter, req *http.Request, info *request.RequestInfo, org string) *http.Request {
	notFound := func(gr schema.GroupResource, name string) *http.Request {
		responsewriters.ErrorNegotiated(apierrors.NewNotFound(gr, name), r.Serializer, schema.GroupVersion{}, w, req)
		return nil
	}
	if !ValidProjectName(org) || r.Hierarchy == nil {
		return notFound(organizationsResource, org)
	}
	if !info.IsResourceRequest {
		switch {
		case !servedInTenants(req.URL.Path):
			notServed(w, req)
			return nil
		case ProcessWide(req.URL.Path):
			return req
		}
		return req.WithContext(withExistenceCheck(req.Context(), existenceCheck{org: org}))
	}
	check := existenceCheck{org: org}
	req = req.WithContext(withExistenceCheck(req.Context(), check))
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	orgNamespace := OrganizationNamespace(org)
	switch {
	case gr == organizationsResource:
		if info.Name != org || info.Verb != "get" {
			return notFound(gr, info.Name)
		}
		return req
	case reviews[gr] && info.Verb == "create":
		return req
	case gr == Catalog:
		// The catalog of Services, read as a consumer (CheckServices).
		if !catalogRead(info) {
			responsewriters.ErrorNegotiated(apierrors.NewMethodNotSupported(gr, info.Verb), r.Serializer, schema.GroupVersion{}, w, req)
			return nil
		}
		return req
	case gr.Group == ServicesGroup:
		// Services are enabled in projects, not in an organization.
		return notFound(gr, info.Name)
	case gr == namespacesResource:
		if info.Name != orgNamespace || info.Verb != "get" {
			return notFound(gr, info.Name)
		}
		return req
	case gr == SuspensionsResource:
		switch {
		case info.Subresource != "" && info.Verb != "get":
		case info.Verb == "list" || info.Verb == "watch":
			return withLabelRequirement(req, OrganizationLabel+"="+org)
		case info.Verb == "get" || info.Verb == "delete":
			check.orgObject, check.name = &gr, info.Name
			return req.WithContext(withExistenceCheck(req.Context(), check))
		}
		responsewriters.ErrorNegotiated(apierrors.NewMethodNotSupported(gr, info.Verb), r.Serializer, schema.GroupVersion{}, w, req)
		return nil
	case IsOrganizationScoped(gr):
		switch info.Verb {
		case "list", "watch":
			return withLabelRequirement(req, OrganizationLabel+"="+org)
		case "create":
			return req
		case "deletecollection":
			responsewriters.ErrorNegotiated(apierrors.NewMethodNotSupported(gr, info.Verb), r.Serializer, schema.GroupVersion{}, w, req)
			return nil
		}
		check.orgObject, check.name = &gr, info.Name
		return req.WithContext(withExistenceCheck(req.Context(), check))
	case info.Namespace == orgNamespace:
		return req
	case info.Namespace != "":
		return notFound(namespacesResource, info.Namespace)
	case info.Verb == "list" || info.Verb == "watch":
		// Across namespaces means across the organization's one namespace.
		return inNamespace(req, info, orgNamespace)
	default:
		return notFound(gr, info.Name)
	}
}

// withLabelRequirement adds a requirement to a list or watch's label selector.
func withLabelRequirement(req *http.Request, requirement string) *http.Request {
	q := req.URL.Query()
	if sel := q.Get("labelSelector"); sel != "" {
		requirement = sel + "," + requirement
	}
	q.Set("labelSelector", requirement)
	req.URL.RawQuery = q.Encode()
	req.RequestURI = req.URL.RequestURI()
	return req
}

// inNamespace turns a list or watch across namespaces into one of namespace.
func inNamespace(req *http.Request, info *request.RequestInfo, namespace string) *http.Request {
	base := "/" + info.APIPrefix
	if info.APIGroup != "" {
		base += "/" + info.APIGroup
	}
	base += "/" + info.APIVersion
	rest := strings.TrimPrefix(req.URL.Path, base)
	if w, ok := strings.CutPrefix(rest, "/watch/"); ok {
		rest = "/watch/namespaces/" + namespace + "/" + w
	} else {
		rest = "/namespaces/" + namespace + rest
	}
	req.URL.Path = base + rest
	req.URL.RawPath = ""
	req.RequestURI = req.URL.RequestURI()
	return req
}
