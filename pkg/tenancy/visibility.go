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
}

// platformOnly reports whether gr is hidden.
func (v visibility) platformOnly(gr schema.GroupResource) bool {
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
	if group == "iam.miloapis.com" || (v.projectCRDs && group == CRDs.Group) {
		return false
	}
	if platformOnlyGroups.Has(group) {
		return true
	}
	return v.gates != nil && v.gates.GroupHidden(v.tenant, group)
}
