// Package objectview lets admission code written for unstructured objects
// (custom resources) read the typed objects that the apiserver's own storage
// hands admission, as it does for the hierarchy's kinds.
package objectview

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Of returns obj as an unstructured object, and a function that writes the
// metadata set on it (labels, annotations, finalizers) back to obj. An
// unstructured obj is returned as it is (its changes are obj's already); a
// typed one is converted to a copy, of kind gvk (the request's kind: the
// apiserver's internal objects carry none). ok is false for nil or an object
// that cannot be converted.
func Of(obj runtime.Object, gvk schema.GroupVersionKind) (u *unstructured.Unstructured, sync func(), ok bool) {
	switch o := obj.(type) {
	case nil:
		return nil, func() {}, false
	case *unstructured.Unstructured:
		return o, func() {}, o != nil
	}
	typed, err := meta.Accessor(obj)
	if err != nil {
		return nil, func() {}, false
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, func() {}, false
	}
	u = &unstructured.Unstructured{Object: content}
	u.SetAPIVersion(gvk.GroupVersion().String())
	u.SetKind(gvk.Kind)
	return u, func() {
		typed.SetLabels(u.GetLabels())
		typed.SetAnnotations(u.GetAnnotations())
		typed.SetFinalizers(u.GetFinalizers())
	}, true
}
