// Package iamadmission validates Milo IAM objects so that mistakes are refused
// with a clear message instead of silently granting nothing:
//
//   - a Role inherits only Roles of its own namespace and of milo-system
//     (evaluator.MayUseRole), names at most evaluator.MaxInheritedRoles of
//     them, and its inheritedRoles form no cycle and no chain longer than
//     evaluator.MaxInheritanceDepth steps;
//   - a GroupMembership names a Group of its own namespace;
//   - a PolicyBinding lives where Milo IAM reads bindings (milo-system or an
//     organization's namespace), grants a Role of its own namespace or of
//     milo-system and, in an organization's namespace, names only that
//     organization or a Folder or Project of it;
//   - an OrganizationMembership lives in its organization's namespace, names
//     roles of the platform or of that organization, and the organization's
//     last owner (a membership with milo-system/owner) cannot be deleted or
//     lose that role while the organization exists.
//
// References to Roles that do not exist (yet) are accepted, so that a file of
// roles and bindings applies in any order; the Role controller reports them in
// the Role's Ready condition.
//
// It reads the evaluator's index (roles) and the hierarchy cache (folders and
// projects), both fed by the server's shared informers.
package iamadmission

import (
	"context"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	iamv1alpha1 "go.miloapis.com/milo/pkg/apis/iam/v1alpha1"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/iam/evaluator"
	"go.miloapis.com/milo/pkg/objectview"
	"go.miloapis.com/milo/pkg/tenancy"
)

// PluginName is the admission plugin's name.
const PluginName = "MiloIAM"

// PlatformNamespace holds the platform's roles and bindings.
const PlatformNamespace = evaluator.PlatformNamespace

// Hierarchy tells which organization a Folder or Project belongs to, and
// what memberships an organization has.
type Hierarchy interface {
	OrganizationOf(ctx context.Context, gr schema.GroupResource, name string) (string, bool, error)
	OrganizationGoing(ctx context.Context, org string) (bool, error)
	MembershipsOf(org string) []*unstructured.Unstructured
}

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins, e *evaluator.Evaluator, h Hierarchy) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), iam: e, hierarchy: h}, nil
	})
}

type plugin struct {
	*admission.Handler
	iam       *evaluator.Evaluator
	hierarchy Hierarchy
}

var _ admission.ValidationInterface = &plugin{}

func (p *plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	gvr := a.GetResource()
	if a.GetSubresource() != "" || tenancy.From(ctx).IsProject() {
		return nil
	}
	if gvr.GroupResource() == hierarchy.Memberships.GroupResource() {
		return p.validateMembership(ctx, a)
	}
	if gvr.Group != "iam.miloapis.com" || a.GetOperation() == admission.Delete {
		return nil
	}
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	var errs field.ErrorList
	switch gvr.Resource {
	case "roles":
		var r iamv1alpha1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
		errs = p.validateRole(&r, a.GetNamespace())
		unknown, err := p.unregisteredPermissions(&r, a.GetOldObject())
		if err != nil && len(errs) == 0 {
			return err
		}
		errs = append(errs, unknown...)
	case "policybindings":
		var b iamv1alpha1.PolicyBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
		var err error
		if errs, err = p.validateBinding(ctx, &b, a.GetNamespace()); err != nil {
			return apierrors.NewInternalError(err)
		}
	case "groupmemberships":
		if ns, _, _ := unstructured.NestedString(u.Object, "spec", "groupRef", "namespace"); ns != a.GetNamespace() {
			errs = field.ErrorList{field.Invalid(field.NewPath("spec", "groupRef", "namespace"), ns,
				"a GroupMembership can only name a Group of its own namespace "+a.GetNamespace())}
		}
	default:
		return nil
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), errs)
	}
	return nil
}

// AllowUnregisteredAnnotation, set to "true" on a Role, lets it include
// permissions no ProtectedResource registers: for Roles written before the
// kinds they name are registered (a migration). The Role controller still
// reports them in the Role's Ready condition.
const AllowUnregisteredAnnotation = "iam.miloapis.com/allow-unregistered-permissions"

// unregisteredPermissions refuses (422) a Role whose includedPermissions name a
// kind or verb no ProtectedResource registers, among those it adds (an
// update that leaves the permissions a Role already had alone is allowed).
func (p *plugin) unregisteredPermissions(r *iamv1alpha1.Role, old runtime.Object) (field.ErrorList, error) {
	if r.Annotations[AllowUnregisteredAnnotation] == "true" {
		return nil, nil
	}
	registered := p.iam.Registered()
	if !registered.Synced() {
		return nil, apierrors.NewServiceUnavailable("the registered permissions are loading; retry in a moment")
	}
	had := map[string]bool{}
	if u, ok := old.(*unstructured.Unstructured); ok {
		perms, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "includedPermissions")
		for _, perm := range perms {
			had[perm] = true
		}
	}
	var added []string
	for _, perm := range r.Spec.IncludedPermissions {
		if !had[perm] {
			added = append(added, perm)
		}
	}
	var errs field.ErrorList
	for _, perm := range evaluator.Unregistered(added, registered.Verbs) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "includedPermissions"), perm,
			"no ProtectedResource registers this kind and verb: register it first (a ProtectedResource created a moment ago may take a moment to count), "+
				"correct the name, or annotate the Role "+AllowUnregisteredAnnotation+"=true"))
	}
	return errs, nil
}

func roleKey(namespace string, r iamv1alpha1.RoleReference) evaluator.RoleKey {
	if r.Namespace != "" {
		namespace = r.Namespace
	}
	return evaluator.RoleKey{Namespace: namespace, Name: r.Name}
}

func (p *plugin) validateRole(r *iamv1alpha1.Role, namespace string) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "inheritedRoles")
	self := evaluator.RoleKey{Namespace: namespace, Name: r.Name}
	if n := len(r.Spec.InheritedRoles); n > evaluator.MaxInheritedRoles {
		errs = append(errs, field.TooMany(path, n, evaluator.MaxInheritedRoles))
	}
	var inherited []evaluator.RoleKey
	for i, ref := range r.Spec.InheritedRoles {
		k := roleKey(namespace, ref)
		if !evaluator.MayUseRole(namespace, k.Namespace) {
			// Whether such a Role exists is not looked at: the answer must
			// not tell.
			errs = append(errs, field.Invalid(path.Index(i), k.String(), roleScope("a Role", namespace, "inherit")))
			continue
		}
		inherited = append(inherited, k)
	}
	if len(errs) > 0 {
		return errs
	}
	if cycle := p.iam.Cycle(self, inherited); len(cycle) > 0 {
		errs = append(errs, field.Invalid(path, cycle[1].String(), "inheriting it would make a cycle: "+chain(cycle)))
	} else if c := p.iam.LongestChain(self, inherited); len(c)-1 > evaluator.MaxInheritanceDepth {
		errs = append(errs, field.Invalid(path, chain(c), fmt.Sprintf("inheritance would be %d levels deep; at most %d are allowed",
			len(c)-1, evaluator.MaxInheritanceDepth)))
	}
	return errs
}

// roleScope says which Roles an object in namespace may name (evaluator.MayUseRole).
func roleScope(what, namespace, verb string) string {
	if namespace == PlatformNamespace {
		return what + " in " + PlatformNamespace + " can " + verb + " only Roles of " + PlatformNamespace
	}
	return what + " in " + namespace + " can " + verb + " only Roles of " + namespace + " and of " + PlatformNamespace
}

func chain(keys []evaluator.RoleKey) string {
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		names = append(names, k.String())
	}
	return strings.Join(names, " → ")
}

func (p *plugin) validateBinding(ctx context.Context, b *iamv1alpha1.PolicyBinding, namespace string) (field.ErrorList, error) {
	org, inOrg := tenancy.OrganizationOfNamespace(namespace)
	if !inOrg && namespace != PlatformNamespace {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "namespace"), namespace,
			"PolicyBindings take effect only in "+PlatformNamespace+" or an organization's namespace (organization-{name})")}, nil
	}
	var errs field.ErrorList
	if role := roleKey(namespace, b.Spec.RoleRef); !evaluator.MayUseRole(namespace, role.Namespace) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "roleRef", "namespace"), role.Namespace, roleScope("a PolicyBinding", namespace, "grant")))
	}
	ref := b.Spec.ResourceSelector.ResourceRef
	path := field.NewPath("spec", "resourceSelector", "resourceRef")
	if ref != nil && ref.Project != "" {
		if ref.APIGroup == evaluator.ResourceManagerGroup {
			return append(errs, field.Invalid(path.Child("project"), ref.Project, "Organizations, Folders and Projects do not live inside a project")), nil
		}
		owner, found, err := p.hierarchy.OrganizationOf(ctx, schema.GroupResource{Group: evaluator.ResourceManagerGroup, Resource: "projects"}, ref.Project)
		if err != nil {
			return nil, err
		}
		if inOrg && (!found || owner != org) {
			errs = append(errs, field.Invalid(path.Child("project"), ref.Project, fmt.Sprintf("no Project %q in organization %s", ref.Project, org)))
		}
		return errs, nil
	}
	if !inOrg || ref == nil || ref.APIGroup != evaluator.ResourceManagerGroup {
		return errs, nil
	}
	switch ref.Kind {
	case "Organization":
		if ref.Name != org {
			errs = append(errs, field.Invalid(path.Child("name"), ref.Name, fmt.Sprintf("a binding in organization %s can only name that organization", org)))
		}
	case "Folder", "Project":
		gr := schema.GroupResource{Group: evaluator.ResourceManagerGroup, Resource: strings.ToLower(ref.Kind) + "s"}
		owner, found, err := p.hierarchy.OrganizationOf(ctx, gr, ref.Name)
		if err != nil {
			return nil, err
		}
		if !found || owner != org {
			errs = append(errs, field.Invalid(path.Child("name"), ref.Name, fmt.Sprintf("no %s %q in organization %s", ref.Kind, ref.Name, org)))
		}
	}
	return errs, nil
}

// OwnerRole is the platform role that makes a member an organization's owner.
var OwnerRole = evaluator.RoleKey{Namespace: PlatformNamespace, Name: "owner"}

// ownsOrganization reports whether a membership (not being deleted) holds the owner role.
func ownsOrganization(u *unstructured.Unstructured) bool {
	if u == nil || u.GetDeletionTimestamp() != nil {
		return false
	}
	roles, _, _ := unstructured.NestedSlice(u.Object, "spec", "roles")
	for _, r := range roles {
		m, _ := r.(map[string]any)
		name, _ := m["name"].(string)
		ns, _ := m["namespace"].(string)
		if ns == "" {
			ns = u.GetNamespace()
		}
		if (evaluator.RoleKey{Namespace: ns, Name: name}) == OwnerRole {
			return true
		}
	}
	return false
}

func (p *plugin) validateMembership(ctx context.Context, a admission.Attributes) error {
	org, inOrg := tenancy.OrganizationOfNamespace(a.GetNamespace())
	if a.GetOperation() != admission.Delete {
		u, _, ok := objectview.Of(a.GetObject(), a.GetKind())
		if !ok {
			return nil
		}
		var errs field.ErrorList
		if !inOrg {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "namespace"), a.GetNamespace(),
				"an OrganizationMembership lives in its organization's namespace (organization-{name})"))
		} else if ref, _, _ := unstructured.NestedString(u.Object, "spec", "organizationRef", "name"); ref != org {
			errs = append(errs, field.Invalid(field.NewPath("spec", "organizationRef", "name"), ref,
				"a membership in "+a.GetNamespace()+" can only be of organization "+org))
		}
		roles, _, _ := unstructured.NestedSlice(u.Object, "spec", "roles")
		for i, r := range roles {
			m, _ := r.(map[string]any)
			if ns, _ := m["namespace"].(string); ns != "" && ns != PlatformNamespace && ns != a.GetNamespace() {
				errs = append(errs, field.Invalid(field.NewPath("spec", "roles").Index(i).Child("namespace"), ns,
					"a membership can name roles of "+PlatformNamespace+" or of its own organization's namespace"))
			}
		}
		if len(errs) == 0 && a.GetOperation() == admission.Update {
			old, _, _ := objectview.Of(a.GetOldObject(), a.GetKind())
			if ownsOrganization(old) && !ownsOrganization(u) {
				if err := p.keepAnOwner(ctx, org, a.GetName()); err != nil {
					errs = append(errs, field.Forbidden(field.NewPath("spec", "roles"), err.Error()))
				}
			}
		}
		if len(errs) > 0 {
			return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), errs)
		}
		return nil
	}
	old, _, _ := objectview.Of(a.GetOldObject(), a.GetKind())
	if !inOrg || !ownsOrganization(old) {
		return nil
	}
	if err := p.keepAnOwner(ctx, org, a.GetName()); err != nil {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(), err)
	}
	return nil
}

// keepAnOwner refuses to let membership be the organization's last owner to
// go, unless the organization itself is going.
func (p *plugin) keepAnOwner(ctx context.Context, org, membership string) error {
	for _, m := range p.hierarchy.MembershipsOf(org) {
		if m.GetName() != membership && ownsOrganization(m) {
			return nil
		}
	}
	going, err := p.hierarchy.OrganizationGoing(ctx, org)
	if err != nil || going {
		return err
	}
	return fmt.Errorf("it is the last owner of organization %s: make another member an owner first", org)
}
