// Package tenancy defines who a request is for — the platform, one project, or
// every project at once — and how that is read from the URL and carried in the
// request context.
package tenancy

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Kind is the kind of tenant a request addresses.
type Kind int

const (
	// Platform is the root control plane at "/": Milo's own kinds, CRDs, APIServices.
	Platform Kind = iota
	// Project is one project's control plane.
	Project
	// AllProjects is the read-only view over every project (list and watch only).
	AllProjects
	// Organization is the platform seen through one organization: its Folders and
	// Projects, and the objects of its namespace organization-{name}.
	Organization
)

// Tenant identifies whose data a request reads or writes.
type Tenant struct {
	Kind Kind
	// Name is the project name for Project, the organization name for Organization.
	Name string
	// ID is a project's storage id (see ProjectID), the key segment of its
	// objects; empty until the router has resolved the project. A project's
	// name can be reused, its storage id never is.
	ID string
}

// PlatformTenant is the tenant of requests made at "/".
var PlatformTenant = Tenant{Kind: Platform}

// AllProjectsTenant is the tenant of requests made under projects/*/control-plane.
var AllProjectsTenant = Tenant{Kind: AllProjects}

// ProjectTenant returns the tenant of the named project.
func ProjectTenant(name string) Tenant { return Tenant{Kind: Project, Name: name} }

// OrganizationTenant returns the tenant of the named organization's context.
func OrganizationTenant(name string) Tenant { return Tenant{Kind: Organization, Name: name} }

// OrganizationNamespace is the namespace holding an organization's namespaced objects.
func OrganizationNamespace(org string) string { return "organization-" + org }

// OrganizationOfNamespace returns the organization whose namespace ns is.
func OrganizationOfNamespace(ns string) (string, bool) {
	org, ok := strings.CutPrefix(ns, "organization-")
	return org, ok && org != ""
}

// String renders the tenant for logs and messages.
func (t Tenant) String() string {
	switch t.Kind {
	case Project:
		return "project " + t.Name
	case AllProjects:
		return "all projects"
	case Organization:
		return "organization " + t.Name
	default:
		return "platform"
	}
}

// View names the kind of context for telemetry: platform, project,
// organization or all-projects. It is one of four values, never a tenant's name.
func (k Kind) View() string {
	switch k {
	case Project:
		return "project"
	case AllProjects:
		return "all-projects"
	case Organization:
		return "organization"
	default:
		return "platform"
	}
}

// IsProject reports whether t is a single project.
func (t Tenant) IsProject() bool { return t.Kind == Project }

// AnnotationKey is the server-owned annotation naming the project an object
// belongs to. The storage layer sets it on every object stored in a project and
// removes it from platform objects; whatever a client sends is overwritten.
const AnnotationKey = "tenancy.miloapis.com/project"

// IDAnnotationKey is the server-owned annotation carrying the storage id of the
// project an object belongs to: the key segment it is stored under. Like
// AnnotationKey, the storage layer owns it.
const IDAnnotationKey = "tenancy.miloapis.com/project-id"

// PlatformSegment is the key segment of the platform tenant. It contains a
// character no project name (a DNS label) may contain, so it never equals a
// project's segment, and since every tenant segment is followed by "/", no
// tenant's key prefix is a prefix of another's.
const PlatformSegment = "_platform"

// UnresolvedSegment is the segment of a project the router could not resolve
// yet (it does not exist, or the cache has not seen it). Nothing is ever stored
// under it: reads find nothing and writes are refused.
const UnresolvedSegment = "_unresolved"

// projectIDPrefix starts every storage id made from a UID. It contains a dot,
// which no DNS label has, so no id equals a project name (the ids of projects
// stored before ids existed, see LegacyID).
const projectIDPrefix = "p."

// ProjectID returns the storage id of the project with the given UID. A
// project's objects are stored under its id, never under its name, so a
// project created with the name of a deleted one starts with empty storage
// whatever happened to the old one's keys.
func ProjectID(uid string) string { return projectIDPrefix + uid }

// StorageIDAnnotation, on a Project, records a storage id other than the one
// made from its UID: the project's name, for projects stored before storage ids
// existed (see docs/storage.md). Only the server writes it, once, when it
// upgrades a data directory; admission keeps clients from setting or changing it.
const StorageIDAnnotation = "tenancy.miloapis.com/storage-id"

// StorageIDOf returns the storage id of a Project object.
func StorageIDOf(project metav1.Object) string {
	if id := project.GetAnnotations()[StorageIDAnnotation]; id != "" {
		return id
	}
	return ProjectID(string(project.GetUID()))
}

// ValidProjectID reports whether id can be a project's storage id: one made by
// ProjectID, or the name of a project stored before storage ids existed.
func ValidProjectID(id string) bool {
	if uid, ok := strings.CutPrefix(id, projectIDPrefix); ok {
		return uid != "" && !strings.ContainsAny(uid, "/_")
	}
	return ValidProjectName(id)
}

// KeySegment is the etcd key segment that holds t's objects: a project's
// storage id. An organization's context is a view of the platform's objects.
// AllProjects has none: it reads across segments.
func (t Tenant) KeySegment() string {
	if t.Kind == Project {
		if t.ID == "" {
			return UnresolvedSegment
		}
		return t.ID
	}
	return PlatformSegment
}

// ValidProjectName reports whether name can be a project: a DNS label.
func ValidProjectName(name string) bool {
	return len(validation.IsDNS1123Label(name)) == 0
}

type contextKey struct{}

// WithTenant returns a context carrying t.
func WithTenant(ctx context.Context, t Tenant) context.Context {
	return context.WithValue(ctx, contextKey{}, t)
}

// From returns the tenant in ctx; a context without one is the platform's, which
// is what the server's own internal calls address.
func From(ctx context.Context) Tenant {
	if t, ok := ctx.Value(contextKey{}).(Tenant); ok {
		return t
	}
	return PlatformTenant
}

// URL prefixes of the tenant views.
const (
	groupVersionPrefix = "/apis/resourcemanager.miloapis.com/v1alpha1/"
	projectsPrefix     = groupVersionPrefix + "projects/"
	orgsPrefix         = groupVersionPrefix + "organizations/"
	controlPlane       = "/control-plane"
)

// ProjectPath returns the URL path prefix of a project's control plane.
func ProjectPath(project string) string { return projectsPrefix + project + controlPlane }

// OrganizationPath returns the URL path prefix of an organization's context.
func OrganizationPath(org string) string { return orgsPrefix + org + controlPlane }

// AllProjectsPath is the URL path prefix of the all-projects view.
const AllProjectsPath = projectsPrefix + "*" + controlPlane

// parsed is what ParsePath found in a URL path.
type parsed struct {
	tenant Tenant
	// org is set for organization control-plane URLs.
	org string
	// rest is the path inside the control plane, always starting with "/".
	rest string
	// matched is false for ordinary platform paths.
	matched bool
}

// parsePath recognises project, all-projects and organization control-plane
// paths and splits off the prefix. Other paths belong to the platform.
func parsePath(path string) parsed {
	var prefix string
	switch {
	case strings.HasPrefix(path, projectsPrefix):
		prefix = projectsPrefix
	case strings.HasPrefix(path, orgsPrefix):
		prefix = orgsPrefix
	default:
		return parsed{tenant: PlatformTenant, rest: path}
	}
	name, rest, ok := strings.Cut(path[len(prefix):], "/")
	if !ok || name == "" {
		return parsed{tenant: PlatformTenant, rest: path}
	}
	rest = "/" + rest
	if rest != controlPlane && !strings.HasPrefix(rest, controlPlane+"/") {
		// e.g. .../projects/web/status: the Project object's own subresource.
		return parsed{tenant: PlatformTenant, rest: path}
	}
	inner := strings.TrimPrefix(rest, controlPlane)
	if inner == "" {
		inner = "/"
	}
	if prefix == orgsPrefix {
		return parsed{tenant: OrganizationTenant(name), org: name, rest: inner, matched: true}
	}
	if name == "*" {
		return parsed{tenant: AllProjectsTenant, rest: inner, matched: true}
	}
	return parsed{tenant: ProjectTenant(name), rest: inner, matched: true}
}

// Stamp makes an object's tenant annotations say t: the project's name and
// storage id for a project, absent otherwise. Whatever the client wrote is
// overwritten.
func Stamp(obj metav1.Object, t Tenant) {
	annotations := obj.GetAnnotations()
	if t.IsProject() {
		if annotations[AnnotationKey] == t.Name && annotations[IDAnnotationKey] == t.KeySegment() {
			return
		}
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[AnnotationKey] = t.Name
		annotations[IDAnnotationKey] = t.KeySegment()
		obj.SetAnnotations(annotations)
		return
	}
	_, name := annotations[AnnotationKey]
	_, id := annotations[IDAnnotationKey]
	if name || id {
		delete(annotations, AnnotationKey)
		delete(annotations, IDAnnotationKey)
		obj.SetAnnotations(annotations)
	}
}

// SegmentOf returns the key segment an object with these annotations is
// stored under: its project's storage id, or the project's name for objects
// written before storage ids existed (whose projects keep their name as id),
// or the platform's segment.
func SegmentOf(annotations map[string]string) string {
	if id := annotations[IDAnnotationKey]; id != "" {
		return id
	}
	if name := annotations[AnnotationKey]; name != "" {
		return name
	}
	return PlatformSegment
}
