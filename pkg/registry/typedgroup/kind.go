package typedgroup

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Kind is what a group's storage needs to know of one of its resources.
// Every kind is a struct with ObjectMeta, Spec and Status.
type Kind struct {
	Resource, Singular string
	Namespaced         bool
	New, NewList       func() runtime.Object
	// Name validates metadata.name (prefix: a generateName).
	Name apimachineryvalidation.ValidateNameFunc
	// Spec checks what the main resource writes; old is nil on create.
	Spec func(obj, old runtime.Object) field.ErrorList
	// Status checks what the status subresource writes; old is the stored
	// object.
	Status func(obj, old runtime.Object) field.ErrorList
	// StatusInMain: the kind has no status subresource, and its main
	// resource writes status with the rest (Spec checks it then).
	StatusInMain bool
	// Fields are the kind's selectable fields beyond metadata.name and
	// metadata.namespace (a custom resource's selectableFields), by their
	// path without the leading dot; SetFields sets each in set from obj.
	Fields    []string
	SetFields func(obj runtime.Object, set fields.Set)
}

// attrs are the labels and fields a selector of the kind matches.
func (k Kind) attrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, err
	}
	set := fields.Set{"metadata.name": m.GetName()}
	if k.Namespaced {
		set["metadata.namespace"] = m.GetNamespace()
	}
	if k.SetFields != nil {
		k.SetFields(obj, set)
	}
	return labels.Set(m.GetLabels()), set, nil
}

// convertFieldLabel accepts the kind's selectable fields in a request's
// field selector, and refuses any other as a custom resource does.
func (k Kind) convertFieldLabel(label, value string) (string, string, error) {
	if label == "metadata.name" || label == "metadata.namespace" || slices.Contains(k.Fields, label) {
		return label, value, nil
	}
	return "", "", fmt.Errorf("field label not supported: %s", label)
}
