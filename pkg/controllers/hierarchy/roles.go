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

var roles = iamv1alpha1.SchemeGroupVersion.WithResource("roles")

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
	if problem != "" {
		cond = metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "InvalidInheritance", Message: problem}
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
