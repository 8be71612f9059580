package typedgroup

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"go.miloapis.com/milo/pkg/apis/crds"
)

// Schema checks objects of a kind against the OpenAPI schema of the kind's
// generated definition, its x-kubernetes-validations rules included, with
// the validators the apiserver runs for a custom resource: what the
// definition refused is refused, with the same messages.
type Schema struct {
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
	rules      *cel.Validator
}

// SchemaOf reads the schema of resource's definition in version.
func SchemaOf(version schema.GroupVersion, resource string) (*Schema, error) {
	crd, err := crds.Definition(version.Group, resource)
	if err != nil {
		return nil, err
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != version.Version || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("the schema of %s: %w", resource, err)
		}
		structural, err := structuralschema.NewStructural(internal)
		if err != nil {
			return nil, fmt.Errorf("the schema of %s: %w", resource, err)
		}
		validator, _, err := validation.NewSchemaValidator(internal)
		if err != nil {
			return nil, fmt.Errorf("the schema of %s: %w", resource, err)
		}
		return &Schema{structural: structural, validator: validator, rules: cel.NewValidator(structural, true, celconfig.PerCallLimit)}, nil
	}
	return nil, fmt.Errorf("the definition of %s has no schema for %s", resource, version.Version)
}

// MustSchemaOf is SchemaOf for the kinds of a package's table, whose
// definitions are embedded in the binary: a failure is a build's mistake.
func MustSchemaOf(version schema.GroupVersion, resource string) *Schema {
	s, err := SchemaOf(version, resource)
	if err != nil {
		panic(err)
	}
	return s
}

// Validate checks obj (old: the stored object on an update, else nil). The
// rules run only once the schema holds, as for a custom resource, whose
// rules would otherwise be handed values of the wrong type.
func (s *Schema) Validate(obj, old runtime.Object) field.ErrorList {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	var oldU map[string]any
	if old != nil {
		if oldU, err = runtime.DefaultUnstructuredConverter.ToUnstructured(old); err != nil {
			return field.ErrorList{field.InternalError(nil, err)}
		}
	}
	dropNulls(u)
	if oldU != nil {
		dropNulls(oldU)
	}
	errs := validation.ValidateCustomResource(nil, u, s.validator)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, s.structural, u)...)
	if len(errs) > 0 {
		return errs
	}
	var oldObj any
	if oldU != nil {
		oldObj = oldU
	}
	ruleErrs, _ := s.rules.Validate(context.Background(), nil, s.structural, u, oldObj, celconfig.RuntimeCELCostBudget)
	return ruleErrs
}

// dropNulls removes the nulls a Go type's empty slices, maps and pointers
// encode as: a custom resource's nulls are pruned before it is checked, so
// that a required field left out is refused as missing, not as null.
func dropNulls(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			dropNulls(v)
		case []any:
			for _, item := range v {
				if item, ok := item.(map[string]any); ok {
					dropNulls(item)
				}
			}
		}
	}
}
