package hierarchy

import (
	"context"
	"fmt"
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
// and its Ready condition: False while an inherited role is missing or the
// inheritance loops (admission refuses cycles, but two writes can race).
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

// flattenRole reads a role's inheritance from the informer's store.
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
// nothing without a word. Wildcards match whatever they stand for.
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
	var out []string
	for _, s := range perms {
		p, ok := evaluator.ParsePermission(s)
		if !ok || p.Group == "*" || p.Resource == "*" {
			continue
		}
		group := p.Group
		if group == "" {
			group = "core"
		}
		resource, _, _ := strings.Cut(p.Resource, "/")
		known, registered := verbs[group+"/"+resource]
		if !registered || (p.Verb != "*" && !slices.Contains(known, p.Verb)) {
			out = append(out, s)
		}
	}
	return out
}
