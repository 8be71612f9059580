package tenancy

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
)

// platformOnlyGroups are API groups served only at "/": they configure the
// platform itself, or (for Milo's groups) are the platform's own hierarchy.
var platformOnlyGroups = sets.New(
	"apiextensions.k8s.io",
	"apiregistration.k8s.io",
	"flowcontrol.apiserver.k8s.io",
	"internal.apiserver.k8s.io",
	"storagemigration.k8s.io",
	"admissionregistration.k8s.io",
	"certificates.k8s.io",
	"resourcemanager.miloapis.com",
	"iam.miloapis.com",
	"quota.miloapis.com",
)

// projectResourcesOfPlatformGroups are the exceptions: kinds of platform groups
// that live inside projects.
var projectResourcesOfPlatformGroups = sets.New(
	schema.GroupResource{Group: "iam.miloapis.com", Resource: "serviceaccounts"},
)

// platformOnlyResources are single platform-only resources of groups that are
// otherwise served in projects.
var platformOnlyResources = sets.New(
	schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"},
)

// CRDs is the resource of CustomResourceDefinitions, which projects define
// for themselves when the server serves project-local CRDs.
var CRDs = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

// PlatformOnly reports whether a resource is served only by the platform
// control plane (on a server that serves no project-local CRDs).
func PlatformOnly(gr schema.GroupResource) bool { return visibility{}.platformOnly(gr) }

// PlatformOnlyGroup reports whether a whole API group is hidden from projects
// (on a server that serves no project-local CRDs).
func PlatformOnlyGroup(group string) bool { return visibility{}.platformOnlyGroup(group) }

// visibility is what one tenant context's router and discovery hide of the
// platform's APIs.
type visibility struct {
	// projectCRDs: the context is a project's (or the all-projects view) on a
	// server that serves project-local CRDs, so apiextensions.k8s.io is
	// served there, with its one resource.
	projectCRDs bool
	// gates, once the tenant is confirmed, hide what Services do not serve
	// to tenant; nil hides nothing.
	gates  ServiceGates
	tenant Tenant
	// org: the context is an organization's, which serves the namespaced
	// resources (in its namespace) and the cluster-scoped ones of
	// orgClusterResources (routeOrganization).
	org bool
	// namespaced, in an OpenAPI document of an organization's context, are
	// the resources the document has namespaced paths for.
	namespaced sets.Set[schema.GroupResource]
}

// orgHiddenGroups are the groups an organization's context serves nothing
// of: platform-only groups without a namespaced resource. Of the quota
// group it serves the grants, claims and buckets of its namespace, read-only
// (the MiloQuota admission plugin refuses writes there).
var orgHiddenGroups = platformOnlyGroups.Clone().Delete("resourcemanager.miloapis.com", "iam.miloapis.com", "quota.miloapis.com")

// orgClusterResources are the cluster-scoped resources an organization's
// context serves.
var orgClusterResources = func() sets.Set[schema.GroupResource] {
	s := sets.New(organizationsResource, namespacesResource, projectsResource, foldersResource, Catalog, SuspensionsResource)
	for gr := range reviews {
		s.Insert(gr)
	}
	return s
}()

// hiddenInScope reports whether gr, namespaced or not, is hidden: in an
// organization's context, a cluster-scoped resource it does not serve.
func (v visibility) hiddenInScope(gr schema.GroupResource, namespaced bool) bool {
	return v.org && !namespaced && !orgClusterResources.Has(gr)
}

// platformOnly reports whether gr is hidden.
func (v visibility) platformOnly(gr schema.GroupResource) bool {
	if v.org {
		return orgHiddenGroups.Has(gr.Group) || (v.gates != nil && !v.gates.Served(v.tenant, gr))
	}
	if projectResourcesOfPlatformGroups.Has(gr) || (v.projectCRDs && gr == CRDs) {
		return false
	}
	if platformOnlyGroups.Has(gr.Group) || platformOnlyResources.Has(gr) {
		return true
	}
	return v.gates != nil && !v.gates.Served(v.tenant, gr)
}

// platformOnlyGroup reports whether the whole group is hidden.
func (v visibility) platformOnlyGroup(group string) bool {
	if v.org {
		return orgHiddenGroups.Has(group) || (v.gates != nil && v.gates.GroupHidden(v.tenant, group))
	}
	if group == "iam.miloapis.com" || (v.projectCRDs && group == CRDs.Group) {
		return false
	}
	if platformOnlyGroups.Has(group) {
		return true
	}
	return v.gates != nil && v.gates.GroupHidden(v.tenant, group)
}
