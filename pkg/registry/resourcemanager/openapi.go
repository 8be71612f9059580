package resourcemanager

import (
	"reflect"
	"strings"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

// OpenAPIDefinitions are the group's types' definitions, generated from them.
func OpenAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	return v1alpha1.GetOpenAPIDefinitions(ref)
}

// modelPackage is the prefix of the group's definitions' names: the names
// they had when the kinds were custom resources.
const modelPackage = "com.miloapis.resourcemanager.v1alpha1."

// DefinitionName gives the group's kinds' definitions their one group,
// version and kind (the scheme knows them by their internal version too),
// and leaves every other name to next.
func DefinitionName(next func(string) (string, spec.Extensions)) func(string) (string, spec.Extensions) {
	return func(name string) (string, spec.Extensions) {
		typeName, ok := strings.CutPrefix(name, modelPackage)
		if !ok {
			return next(name)
		}
		if !rootKinds[typeName] {
			return name, nil
		}
		return name, spec.Extensions{"x-kubernetes-group-version-kind": []any{map[string]any{
			"group": v1alpha1.GroupName, "version": v1alpha1.SchemeGroupVersion.Version, "kind": typeName,
		}}}
	}
}

// rootKinds are the names of the group's kinds and their lists.
var rootKinds = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range kinds {
		m[reflect.TypeOf(k.new()).Elem().Name()] = true
		m[reflect.TypeOf(k.newList()).Elem().Name()] = true
	}
	return m
}()
