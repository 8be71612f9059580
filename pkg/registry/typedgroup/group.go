// Package typedgroup serves one of Milo's own API groups from typed storage,
// the way the apiserver serves its built-in kinds: Go types decoded from JSON,
// strategies and validation in Go, OpenAPI generated from the types.
//
// Milo's kinds were custom resources first. A custom resource is held in the
// watch cache as a tree of maps and is decoded, coerced to its schema and
// validated by interpreting that schema on every read from etcd and every
// write. A group served from here keeps what its custom resources were: the
// group, versions, kinds, fields and printer columns (their definitions are
// still generated from the same types and installed nowhere), and the objects
// are stored as they were, as JSON under the same keys, so a data directory
// written while they were custom resources is read as it is.
package typedgroup

import (
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// StorageMediaType is how a group's objects are stored: JSON, as they were
// stored as custom resources, so that data written then and now is one format
// (the types have no protobuf encoding).
const StorageMediaType = runtime.ContentTypeJSON

// Group is one API group served from typed storage, in one version.
type Group struct {
	// Version is the group and its one served version.
	Version schema.GroupVersion
	// Kinds are its resources.
	Kinds []Kind
	// AddToScheme registers the versioned kinds (the package's AddToScheme).
	AddToScheme func(*runtime.Scheme) error
	// Defaults, if set, registers the kinds' defaulting functions: applied
	// where a custom resource's defaults were, as a request or a stored
	// object is decoded, before admission sees it.
	Defaults func(*runtime.Scheme)
	// Definitions are the kinds' generated OpenAPI definitions.
	Definitions func(common.ReferenceCallback) map[string]common.OpenAPIDefinition
	// ModelPackage is the prefix of the definitions' names: the names they
	// had when the kinds were custom resources (the types'
	// +k8s:openapi-model-package).
	ModelPackage string
}

// Resources are the group's resources, for storage settings made before the
// storage exists (key prefixes, media type).
func (g *Group) Resources() []schema.GroupResource {
	out := make([]schema.GroupResource, len(g.Kinds))
	for i, k := range g.Kinds {
		out[i] = g.Version.WithResource(k.Resource).GroupResource()
	}
	return out
}

// KeyPrefix is where a resource's objects are stored under the storage prefix:
// where they were stored as custom resources.
func KeyPrefix(gr schema.GroupResource) string { return gr.Group + "/" + gr.Resource }

// Install registers the group's kinds with scheme: as their one served
// version, and as the internal version the apiserver's storage and admission
// work in. Both are the same Go types, so nothing is converted between them.
func (g *Group) Install(scheme *runtime.Scheme) {
	utilruntime.Must(g.AddToScheme(scheme))
	internal := schema.GroupVersion{Group: g.Version.Group, Version: runtime.APIVersionInternal}
	for _, k := range g.Kinds {
		scheme.AddKnownTypes(internal, k.New(), k.NewList())
	}
	utilruntime.Must(scheme.SetVersionPriority(g.Version))
	for _, k := range g.Kinds {
		kind := reflect.TypeOf(k.New()).Elem().Name()
		utilruntime.Must(scheme.AddFieldLabelConversionFunc(g.Version.WithKind(kind), k.convertFieldLabel))
	}
	if g.Defaults != nil {
		g.Defaults(scheme)
	}
}

// Kind returns the kind of resource; false if the group has none.
func (g *Group) Kind(resource string) (Kind, bool) {
	for _, k := range g.Kinds {
		if k.Resource == resource {
			return k, true
		}
	}
	return Kind{}, false
}

// StrategyOf returns the strategy of resource's kind, as its storage has
// it but for a create hook; false if the group has no such kind.
func (g *Group) StrategyOf(resource string) (Strategy, bool) {
	k, ok := g.Kind(resource)
	return NewStrategy(g.Version, k, nil), ok
}

// DefinitionName gives the groups' kinds' definitions their one group,
// version and kind (the scheme knows them by their internal version too),
// and leaves every other name to next.
func DefinitionName(groups []*Group, next func(string) (string, spec.Extensions)) func(string) (string, spec.Extensions) {
	return func(name string) (string, spec.Extensions) {
		for _, g := range groups {
			typeName, ok := strings.CutPrefix(name, g.ModelPackage)
			if !ok {
				continue
			}
			if !g.rootKind(typeName) {
				return name, nil
			}
			return name, spec.Extensions{"x-kubernetes-group-version-kind": []any{map[string]any{
				"group": g.Version.Group, "version": g.Version.Version, "kind": typeName,
			}}}
		}
		return next(name)
	}
}

// rootKind reports whether typeName is one of the group's kinds or their lists.
func (g *Group) rootKind(typeName string) bool {
	for _, k := range g.Kinds {
		if reflect.TypeOf(k.New()).Elem().Name() == typeName || reflect.TypeOf(k.NewList()).Elem().Name() == typeName {
			return true
		}
	}
	return false
}
