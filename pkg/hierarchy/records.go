package hierarchy

import (
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

// The readers below take what the hierarchy's informers hold (the group's Go
// types) and, for callers and tests that have one, the same object unstructured.

// Object returns obj, an object an informer holds or handed a handler (a
// deleted object's last state included), as metav1.Object; nil for anything else.
func Object(obj any) metav1.Object {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, _ := obj.(metav1.Object)
	if m == nil {
		return nil
	}
	if v := reflect.ValueOf(m); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return m
}

// KindOf is the kind of a hierarchy object: its Go type's name (objects
// decoded by a typed client carry no kind), or an unstructured object's kind.
func KindOf(obj any) string {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.GetKind()
	}
	if t := reflect.TypeOf(obj); t != nil && t.Kind() == reflect.Pointer {
		return t.Elem().Name()
	}
	return ""
}

// ParentOf returns the kind and name of a Folder's parentRef or a Project's ownerRef.
func ParentOf(obj any) (kind, name string) {
	switch o := obj.(type) {
	case *resourcemanagerv1alpha1.Project:
		return string(o.Spec.OwnerRef.Kind), o.Spec.OwnerRef.Name
	case *resourcemanagerv1alpha1.Folder:
		return string(o.Spec.ParentRef.Kind), o.Spec.ParentRef.Name
	case *unstructured.Unstructured:
		field := "parentRef"
		if o.GetKind() == "Project" {
			field = "ownerRef"
		}
		kind, _, _ = unstructured.NestedString(o.Object, "spec", field, "kind")
		name, _, _ = unstructured.NestedString(o.Object, "spec", field, "name")
		return kind, name
	}
	return "", ""
}

// Conditions are the status conditions of a hierarchy object. A typed
// object's are its own, not a copy: read them, do not change them.
func Conditions(obj any) []metav1.Condition {
	switch o := obj.(type) {
	case *resourcemanagerv1alpha1.Project:
		return o.Status.Conditions
	case *resourcemanagerv1alpha1.Folder:
		return o.Status.Conditions
	case *resourcemanagerv1alpha1.Organization:
		return o.Status.Conditions
	case *resourcemanagerv1alpha1.OrganizationMembership:
		return o.Status.Conditions
	case *unstructured.Unstructured:
		raw, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
		out := make([]metav1.Condition, 0, len(raw))
		for _, c := range raw {
			m, ok := c.(map[string]any)
			if !ok {
				continue
			}
			var cond metav1.Condition
			if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond) == nil {
				out = append(out, cond)
			}
		}
		return out
	}
	return nil
}

// readyCondition is obj's Ready condition, nil without one. The controllers
// keep one condition of each type (meta.SetStatusCondition).
func readyCondition(obj any) *metav1.Condition {
	conds := Conditions(obj)
	for i := range conds {
		if conds[i].Type == resourcemanagerv1alpha1.ConditionReady {
			return &conds[i]
		}
	}
	return nil
}

// IsReady reports whether obj's Ready condition is True for its current
// generation (or names none).
func IsReady(obj any) bool {
	c, m := readyCondition(obj), Object(obj)
	return c != nil && m != nil && c.Status == metav1.ConditionTrue &&
		(c.ObservedGeneration == 0 || c.ObservedGeneration == m.GetGeneration())
}

// ReadyMessage is the message of obj's Ready condition.
func ReadyMessage(obj any) string {
	if c := readyCondition(obj); c != nil {
		return c.Message
	}
	return ""
}

// initialized reports whether the project has been Ready once. Its control plane
// stays initialized when a later change of its spec (a move) waits for the
// controllers to confirm Ready again.
func initialized(obj any) bool {
	c := readyCondition(obj)
	return c != nil && c.Status == metav1.ConditionTrue
}

// AsUnstructured returns a hierarchy object as an unstructured object of its
// group, version and kind: a copy of a typed one (for code that edits
// objects as maps and writes them with the dynamic client), an unstructured
// one as it is.
func AsUnstructured(obj any) (*unstructured.Unstructured, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: fields}
	u.SetAPIVersion(resourcemanagerv1alpha1.SchemeGroupVersion.String())
	u.SetKind(KindOf(obj))
	return u, nil
}
