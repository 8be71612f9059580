package hierarchy

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	iamv1alpha1 "go.miloapis.com/milo/pkg/apis/iam/v1alpha1"
	"go.miloapis.com/milo/pkg/iam/evaluator"
)

var (
	roles              = iamv1alpha1.SchemeGroupVersion.WithResource("roles")
	protectedResources = iamv1alpha1.SchemeGroupVersion.WithResource("protectedresources")
)

// syncRole writes a Role's flattened permissions into status.effectivePermissions,
// and its Ready condition: False while an inherited role is missing, may not
// be inherited (another organization's: reported the same whether it exists
// or not), or the inheritance loops or goes beyond the limits (admission
// refuses those, but two writes can race, and older Roles predate the rules).
func (c *Controllers) syncRole(ctx context.Context, u *unstructured.Unstructured) error {
	if u.GetDeletionTimestamp() != nil {
		return nil
	}
	effective, problem := flattenRole(c.roles.GetStore(), u.GetNamespace(), u.GetName())
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Flattened",
		Message: fmt.Sprintf("%d effective permissions", len(effective))}
	included, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "includedPermissions")
	if problem != "" {
		cond = metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "InvalidInheritance", Message: problem}
	} else if unknown := unregistered(c.protected.GetStore(), included); len(unknown) > 0 {
		cond = metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "UnregisteredPermissions",
			Message: "no ProtectedResource registers " + strings.Join(unknown, ", ") + " (granted nonetheless: register the kind, or correct the name)"}
	}
	current, _, _ := unstructured.NestedStringSlice(u.Object, "status", "effectivePermissions")
	conditions := conditionsOf(u)
	cond.ObservedGeneration = u.GetGeneration()
	changed := meta.SetStatusCondition(&conditions, cond)
	if slices.Equal(current, effective) && !changed {
		return nil
	}
	updated := u.DeepCopy()
	list := make([]any, 0, len(effective))
	for _, p := range effective {
		list = append(list, p)
	}
	unstructured.SetNestedSlice(updated.Object, list, "status", "effectivePermissions") //nolint:errcheck
	return c.writeConditions(ctx, roles, updated, conditions)
}

// flattenRole reads a role's inheritance from the informer's store. Flatten
// never asks for a Role the role may not inherit, so nothing of another
// organization's Roles shows in the status.
func flattenRole(store cache.Store, namespace, name string) ([]string, string) {
	perms, problems := evaluator.Flatten(evaluator.RoleKey{Namespace: namespace, Name: name},
		func(k evaluator.RoleKey) ([]string, []evaluator.RoleKey, bool) {
			obj, ok, _ := store.GetByKey(k.Namespace + "/" + k.Name)
			if !ok {
				return nil, nil, false
			}
			var r iamv1alpha1.Role
			if runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &r) != nil {
				return nil, nil, false
			}
			inherited := make([]evaluator.RoleKey, 0, len(r.Spec.InheritedRoles))
			for _, in := range r.Spec.InheritedRoles {
				ns := in.Namespace
				if ns == "" {
					ns = k.Namespace
				}
				inherited = append(inherited, evaluator.RoleKey{Namespace: ns, Name: in.Name})
			}
			return r.Spec.IncludedPermissions, inherited, true
		})
	return perms, strings.Join(problems, "; ")
}

// unregistered returns the permissions that name a kind or verb no
// ProtectedResource registers: most likely a typo, which would otherwise grant
// nothing without a word (admission refuses them unless the Role allows them,
// see iamadmission). Wildcards match whatever they stand for.
func unregistered(protected cache.Store, perms []string) []string {
	verbs := map[string][]string{} // group/plural → verbs
	for _, obj := range protected.List() {
		var pr iamv1alpha1.ProtectedResource
		if runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &pr) != nil {
			continue
		}
		key := pr.Spec.ServiceRef.Name + "/" + pr.Spec.Plural
		verbs[key] = append(verbs[key], pr.Spec.Permissions...)
	}
	return evaluator.Unregistered(perms, func(group, plural string) ([]string, bool) {
		v, ok := verbs[group+"/"+plural]
		return v, ok
	})
}

// inheritorsIndex indexes Roles by the Roles they inherit ("namespace/name"),
// as far as the inheritance counts (evaluator.Inherits).
const inheritorsIndex = "iam.miloapis.com/inherited-role"

// addRoleIndex adds inheritorsIndex to the Roles' informer, once.
func addRoleIndex(roles cache.SharedIndexInformer) error {
	if _, ok := roles.GetIndexer().GetIndexers()[inheritorsIndex]; ok {
		return nil
	}
	return roles.AddIndexers(cache.Indexers{inheritorsIndex: func(obj any) ([]string, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, nil
		}
		var keys []string
		for _, k := range evaluator.Inherits(u.GetNamespace(), inheritedRoles(u)) {
			keys = append(keys, k.String())
		}
		return keys, nil
	}})
}

// inheritedRoles returns the Roles u names in spec.inheritedRoles, an empty
// namespace meaning u's.
func inheritedRoles(u *unstructured.Unstructured) []evaluator.RoleKey {
	refs, _, _ := unstructured.NestedSlice(u.Object, "spec", "inheritedRoles")
	out := make([]evaluator.RoleKey, 0, len(refs))
	for _, r := range refs {
		m, _ := r.(map[string]any)
		name, _ := m["name"].(string)
		ns, _ := m["namespace"].(string)
		if ns == "" {
			ns = u.GetNamespace()
		}
		out = append(out, evaluator.RoleKey{Namespace: ns, Name: name})
	}
	return out
}

// roleInheritors queues, when a Role appears, changes its spec or goes, the
// Roles whose status depends on it: those inheriting it within
// evaluator.MaxInheritanceDepth steps. Its own sync is queued by its loop.
// Status writes and resyncs queue nothing, so applying many Roles costs work
// in proportion to what inherits what, not to the square of their number.
func roleInheritors(l *loop) cache.ResourceEventHandlerFuncs {
	changed := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok {
			enqueueInheritors(l, evaluator.RoleKey{Namespace: u.GetNamespace(), Name: u.GetName()})
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, obj any) {
			o, _ := old.(*unstructured.Unstructured)
			u, _ := obj.(*unstructured.Unstructured)
			if o == nil || u == nil || !reflect.DeepEqual(o.Object["spec"], u.Object["spec"]) {
				changed(obj)
			}
		},
		DeleteFunc: changed,
	}
}

// enqueueInheritors queues the Roles inheriting key, directly or not, within
// evaluator.MaxInheritanceDepth steps.
func enqueueInheritors(l *loop, key evaluator.RoleKey) {
	indexer := l.informer.GetIndexer()
	seen := map[string]bool{key.String(): true}
	level := []string{key.String()}
	for step := 0; step < evaluator.MaxInheritanceDepth && len(level) > 0; step++ {
		var next []string
		for _, k := range level {
			inheritors, _ := indexer.IndexKeys(inheritorsIndex, k)
			for _, in := range inheritors {
				if !seen[in] {
					seen[in] = true
					next = append(next, in)
					l.queue.Add(in)
				}
			}
		}
		level = next
	}
}
