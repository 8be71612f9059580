package typedgroup

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"go.miloapis.com/milo/pkg/apis/crds"
)

// REST is one kind's storage.
type REST struct {
	*genericregistry.Store
}

// Categories puts every kind in `kubectl get milo`.
func (*REST) Categories() []string { return []string{"milo"} }

// StatusREST is one kind's status subresource.
type StatusREST struct {
	store *genericregistry.Store
}

// New makes an empty object of the kind.
func (r *StatusREST) New() runtime.Object { return r.store.New() }

// Destroy does nothing: the main resource's storage is destroyed with it.
func (r *StatusREST) Destroy() {}

// Get reads the object whose status is asked for.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes status only.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// The subresource never creates (the object's create would skip admission of it).
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields are the fields a status write does not change.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints the object as its kind's columns.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// newStorage makes a kind's storage and, if it has one, its status
// subresource's.
func (g *Group) newStorage(k Kind, optsGetter generic.RESTOptionsGetter, prepare func(context.Context, runtime.Object)) (*REST, *StatusREST, error) {
	table, err := g.PrinterColumns(k)
	if err != nil {
		return nil, nil, err
	}
	s := NewStrategy(g.Version, k, prepare)
	store := &genericregistry.Store{
		NewFunc:                   k.New,
		NewListFunc:               k.NewList,
		DefaultQualifiedResource:  g.Version.WithResource(k.Resource).GroupResource(),
		SingularQualifiedResource: g.Version.WithResource(k.Singular).GroupResource(),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: k.attrs}); err != nil {
		return nil, nil, err
	}
	if k.StatusInMain {
		return &REST{store}, nil, nil
	}
	status := *store
	status.UpdateStrategy = StatusStrategy{s}
	status.ResetFieldsStrategy = StatusStrategy{s}
	return &REST{store}, &StatusREST{store: &status}, nil
}

// PrinterColumns are the kind's columns as its generated definition names
// them (the +kubebuilder:printcolumn markers of the types).
func (g *Group) PrinterColumns(k Kind) (rest.TableConvertor, error) {
	crd, err := crds.Definition(g.Version.Group, k.Resource)
	if err != nil {
		return nil, err
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == g.Version.Version {
			return tableconvertor.New(v.AdditionalPrinterColumns)
		}
	}
	return nil, fmt.Errorf("the definition of %s has no version %s", k.Resource, g.Version.Version)
}
