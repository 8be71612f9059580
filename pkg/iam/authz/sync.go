package authz

import (
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	iamv1alpha1 "go.miloapis.com/milo/pkg/apis/iam/v1alpha1"
	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/iam/evaluator"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Resources of the iam group the evaluator reads.
var (
	RolesResource            = iamv1alpha1.SchemeGroupVersion.WithResource("roles")
	PolicyBindingsResource   = iamv1alpha1.SchemeGroupVersion.WithResource("policybindings")
	GroupMembershipsResource = iamv1alpha1.SchemeGroupVersion.WithResource("groupmemberships")
	foldersResource          = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("folders")
	projectsResource         = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("projects")
)

// Sync feeds e from factory's informers of Folders, Projects, Roles,
// PolicyBindings and GroupMemberships — one informer per kind, shared with
// everything else in the server that reads them. Changes reach decisions as
// soon as the informers see them. The caller starts factory.
func Sync(e *evaluator.Evaluator, factory dynamicinformer.DynamicSharedInformerFactory) ([]cache.InformerSynced, error) {
	var synced []cache.InformerSynced
	// same, when given, tells an update that changes nothing the evaluator
	// keeps, which is not applied.
	on := func(gvr schema.GroupVersionResource, same func(old, obj *unstructured.Unstructured) bool, set func(*unstructured.Unstructured), del func(key string, obj *unstructured.Unstructured)) error {
		inf := factory.ForResource(gvr).Informer()
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { apply(obj, set) },
			UpdateFunc: func(old, obj any) {
				o, _ := old.(*unstructured.Unstructured)
				u, _ := obj.(*unstructured.Unstructured)
				if same != nil && o != nil && u != nil && same(o, u) {
					return
				}
				apply(obj, set)
			},
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if u, ok := obj.(*unstructured.Unstructured); ok {
					del(keyOf(u), u)
				}
			},
		})
		synced = append(synced, inf.HasSynced)
		return err
	}
	// Folders and Projects: the hierarchy's informers hold them as Go types.
	for _, x := range []struct {
		gvr  schema.GroupVersionResource
		node func(string) evaluator.Node
	}{{foldersResource, evaluator.Folder}, {projectsResource, evaluator.Project}} {
		node := x.node
		setParent := func(obj any) {
			m := hierarchy.Object(obj)
			if m == nil {
				return
			}
			kind, name := hierarchy.ParentOf(obj)
			parent := evaluator.Organization(name)
			if kind == "Folder" {
				parent = evaluator.Folder(name)
			}
			e.SetParent(node(m.GetName()), parent)
		}
		inf := factory.ForResource(x.gvr).Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    setParent,
			UpdateFunc: func(_, obj any) { setParent(obj) },
			DeleteFunc: func(obj any) {
				if m := hierarchy.Object(obj); m != nil {
					e.DeleteNode(node(m.GetName()))
				}
			},
		}); err != nil {
			return nil, err
		}
		synced = append(synced, inf.HasSynced)
	}
	if err := on(RolesResource, sameRole, func(u *unstructured.Unstructured) {
		var r iamv1alpha1.Role
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r) != nil {
			return
		}
		e.SetRole(evaluator.RoleKey{Namespace: r.Namespace, Name: r.Name}, r.Spec.IncludedPermissions, roleKeys(r.Namespace, r.Spec.InheritedRoles))
	}, func(_ string, u *unstructured.Unstructured) {
		e.DeleteRole(evaluator.RoleKey{Namespace: u.GetNamespace(), Name: u.GetName()})
	}); err != nil {
		return nil, err
	}
	if err := on(PolicyBindingsResource, nil, func(u *unstructured.Unstructured) {
		var b iamv1alpha1.PolicyBinding
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b) != nil {
			return
		}
		if binding, ok := bindingOf(&b); ok {
			e.SetBinding(keyOf(u), binding)
		} else {
			e.DeleteBinding(keyOf(u))
		}
	}, func(key string, _ *unstructured.Unstructured) { e.DeleteBinding(key) }); err != nil {
		return nil, err
	}
	if err := on(GroupMembershipsResource, nil, func(u *unstructured.Unstructured) {
		var m iamv1alpha1.GroupMembership
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m) != nil {
			return
		}
		// Only a Group of the membership's own namespace: otherwise whoever may
		// write memberships in one organization could join another's groups.
		if m.Spec.GroupRef.Namespace != m.Namespace {
			e.DeleteMembership(keyOf(u))
			return
		}
		e.SetMembership(keyOf(u), m.Spec.UserRef.Name, evaluator.Subject{Kind: "Group", Namespace: m.Namespace, Name: m.Spec.GroupRef.Name})
	}, func(key string, _ *unstructured.Unstructured) { e.DeleteMembership(key) }); err != nil {
		return nil, err
	}
	// Milo's own kinds are registered whatever the informer has delivered
	// yet, so that the bootstrap Roles are never refused.
	for _, pr := range BootstrapProtectedResources() {
		e.Registered().Set(pr.Name, registrationOf(&pr))
	}
	if err := on(ProtectedResourcesResource, nil, func(u *unstructured.Unstructured) {
		var pr iamv1alpha1.ProtectedResource
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pr) != nil {
			return
		}
		e.Registered().Set(pr.Name, registrationOf(&pr))
	}, func(_ string, u *unstructured.Unstructured) {
		if u.GetLabels()[bootstrapLabel] != "true" {
			e.Registered().Delete(u.GetName())
		}
	}); err != nil {
		return nil, err
	}
	return synced, nil
}

// registrationOf is what a ProtectedResource registers: its serviceRef
// names the kind's API group ("core" for the core group).
// Its parentResources name their group as API groups do ("" for the core
// group), and are kept as registrations name theirs ("core").
func registrationOf(pr *iamv1alpha1.ProtectedResource) evaluator.Registration {
	reg := evaluator.Registration{Group: pr.Spec.ServiceRef.Name, Plural: pr.Spec.Plural, Verbs: pr.Spec.Permissions, Kind: pr.Spec.Kind}
	for _, p := range pr.Spec.ParentResources {
		group := p.APIGroup
		if group == "" {
			group = "core"
		}
		reg.Parents = append(reg.Parents, evaluator.KindRef{Group: group, Kind: p.Kind})
	}
	return reg
}

// sameRole reports whether two versions of a Role grant the same: what
// changed, if anything, is not its permissions or inheritance (the informer's
// resync delivers every Role again unchanged; the Role controller writes
// status), so nothing needs converting or flattening again.
func sameRole(old, obj *unstructured.Unstructured) bool {
	for _, field := range []string{"includedPermissions", "inheritedRoles"} {
		a, _, _ := unstructured.NestedFieldNoCopy(old.Object, "spec", field)
		b, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", field)
		if !reflect.DeepEqual(a, b) {
			return false
		}
	}
	return old.GetNamespace() == obj.GetNamespace() && old.GetName() == obj.GetName()
}

func apply(obj any, set func(*unstructured.Unstructured)) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		set(u)
	}
}

func keyOf(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

// roleKeys resolves role references; a reference without a namespace means the
// referring object's namespace.
func roleKeys(namespace string, refs []iamv1alpha1.RoleReference) []evaluator.RoleKey {
	out := make([]evaluator.RoleKey, 0, len(refs))
	for _, r := range refs {
		out = append(out, roleKey(namespace, r))
	}
	return out
}

func roleKey(namespace string, r iamv1alpha1.RoleReference) evaluator.RoleKey {
	if r.Namespace != "" {
		namespace = r.Namespace
	}
	return evaluator.RoleKey{Namespace: namespace, Name: r.Name}
}

// PlatformNamespace holds the platform's roles and bindings.
const PlatformNamespace = evaluator.PlatformNamespace

// bindingOf is what the evaluator keeps of a PolicyBinding. A binding made in
// an organization's namespace applies inside that organization only; one made
// in the platform's namespace applies everywhere. Bindings anywhere else grant
// nothing (ok is false): only those two places are governed by Milo IAM. Nor
// does a binding granting a Role of another organization (admission refuses
// those; one stored before is ignored), which would show that Role's
// permissions to whoever made the binding.
func bindingOf(b *iamv1alpha1.PolicyBinding) (evaluator.Binding, bool) {
	out := evaluator.Binding{Role: roleKey(b.Namespace, b.Spec.RoleRef)}
	if !evaluator.MayUseRole(b.Namespace, out.Role.Namespace) {
		return out, false
	}
	if org, ok := tenancy.OrganizationOfNamespace(b.Namespace); ok {
		out.Scope = org
	} else if b.Namespace != PlatformNamespace {
		return out, false
	}
	for _, s := range b.Spec.Subjects {
		out.Subjects = append(out.Subjects, evaluator.Subject{Kind: string(s.Kind), Namespace: s.Namespace, Name: s.Name})
	}
	switch sel := b.Spec.ResourceSelector; {
	case sel.ResourceRef != nil:
		ref := sel.ResourceRef
		n := evaluator.NodeOfKind(ref.APIGroup, ref.Kind, ref.Namespace, ref.Name)
		if ref.Project != "" {
			n = evaluator.ProjectObject(ref.Project, n.Group, n.Resource, ref.Namespace, ref.Name)
		}
		out.Resource = &n
	case sel.ResourceKind != nil:
		gr := evaluator.NodeOfKind(sel.ResourceKind.APIGroup, sel.ResourceKind.Kind, "", "")
		out.Kind = &schema.GroupResource{Group: gr.Group, Resource: gr.Resource}
	default:
		return out, false
	}
	return out, true
}
