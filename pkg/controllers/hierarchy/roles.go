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

// flattenRole returns the sorted union of a role's permissions and those of
// every role it inherits, and a description of what is wrong, if anything.
func flattenRole(store cache.Store, namespace, name string) ([]string, string) {
	set := map[string]struct{}{}
	var problems []string
	visiting := map[string]bool{}
	done := map[string]bool{}
	var walk func(ns, name string, path []string)
	walk = func(ns, name string, path []string) {
		key := ns + "/" + name
		path = append(path, key)
		if visiting[key] {
			problems = append(problems, "inheritance cycle: "+strings.Join(path, " → "))
			return
		}
		if done[key] {
			return
		}
		obj, ok, _ := store.GetByKey(key)
		if !ok {
			problems = append(problems, "inherited role "+key+" does not exist")
			return
		}
		var r iamv1alpha1.Role
		if runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &r) != nil {
			return
		}
		visiting[key] = true
		for _, p := range r.Spec.IncludedPermissions {
			set[p] = struct{}{}
		}
		for _, in := range r.Spec.InheritedRoles {
			inNS := in.Namespace
			if inNS == "" {
				inNS = ns
			}
			walk(inNS, in.Name, path)
		}
		visiting[key] = false
		done[key] = true
	}
	walk(namespace, name, nil)
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, strings.Join(problems, "; ")
}
