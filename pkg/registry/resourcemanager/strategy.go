package resourcemanager

import (
	"context"
	"reflect"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/projectbootstrap"
)

// strategy is the create, update and delete behaviour of one kind, that of a
// custom resource with a status subresource: the main resource writes
// metadata and spec (a status sent with them is ignored), the status
// subresource writes status only, and the generation counts spec changes.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	kind kind
	// bootstrap, if set, has a new Project's bootstrap stored with it.
	bootstrap func(context.Context, *v1alpha1.Project) bool
}

func newStrategy(k kind) strategy {
	return strategy{ObjectTyper: legacyscheme.Scheme, NameGenerator: names.SimpleNameGenerator, kind: k}
}

// NamespaceScoped reports whether the kind lives in namespaces.
func (s strategy) NamespaceScoped() bool { return s.kind.namespaced }

// PrepareForCreate drops the status a client sent and starts the generation.
// A Project whose bootstrap is stored with it (its namespaces and what they
// hold: package projectbootstrap) is created Ready, as the controllers would
// make it once they had bootstrapped it, so that it is usable at once and
// costs no further write.
func (s strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	clearField(obj, "Status")
	accessor(obj).SetGeneration(1)
	s.defaults(obj)
	if p, ok := obj.(*v1alpha1.Project); ok && s.bootstrap != nil && s.bootstrap(ctx, p) {
		p.Status.ObservedGeneration = p.Generation
		p.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: p.Generation,
			LastTransitionTime: metav1.Now(), Reason: projectbootstrap.ReadyReason, Message: projectbootstrap.ReadyMessage}}
	}
}

// PrepareForUpdate keeps the stored status and counts a change of spec.
func (s strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	copyField(obj, old, "Status")
	s.defaults(obj)
	generation := accessor(old).GetGeneration()
	if !apiequality.Semantic.DeepEqual(fieldOf(obj, "Spec"), fieldOf(old, "Spec")) {
		generation++
	}
	accessor(obj).SetGeneration(generation)
}

// defaults are the scheme's, which decoding a request already applied: a
// write that did not come through decoding gets them too.
func (s strategy) defaults(obj runtime.Object) { legacyscheme.Scheme.Default(obj) }

// Validate checks a new object.
func (s strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessor(accessor(obj), s.kind.namespaced, s.kind.name, field.NewPath("metadata"))
	return append(errs, s.kind.spec(obj, nil)...)
}

// ValidateUpdate checks an update against the stored object. An unchanged
// spec is not checked again, as a custom resource's unchanged fields are
// not (validation ratcheting): an object stored under other rules can still
// have its metadata changed, its finalizers removed.
func (s strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(accessor(obj), accessor(old), field.NewPath("metadata"))
	errs = append(errs, apimachineryvalidation.ValidateObjectMetaAccessor(accessor(obj), s.kind.namespaced, s.kind.name, field.NewPath("metadata"))...)
	if apiequality.Semantic.DeepEqual(fieldOf(obj, "Spec"), fieldOf(old, "Spec")) {
		return errs
	}
	return append(errs, s.kind.spec(obj, old)...)
}

// WarningsOnCreate has nothing to warn of.
func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

// WarningsOnUpdate has nothing to warn of.
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// Canonicalize leaves the object as it is.
func (strategy) Canonicalize(runtime.Object) {}

// AllowCreateOnUpdate: an update of a missing object is 404, as for a custom resource.
func (strategy) AllowCreateOnUpdate() bool { return false }

// AllowUnconditionalUpdate: an update needs a resourceVersion, as for a custom resource.
func (strategy) AllowUnconditionalUpdate() bool { return false }

// GetResetFields: the main resource does not write status.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(v1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// statusStrategy is the status subresource's: everything but status (and
// the managed fields that record the write) stays as stored.
type statusStrategy struct{ strategy }

// PrepareForUpdate takes the new status onto the stored object.
func (statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	status := reflect.ValueOf(fieldOf(obj, "Status"))
	managed := accessor(obj).GetManagedFields()
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(old.DeepCopyObject()).Elem())
	reflect.ValueOf(obj).Elem().FieldByName("Status").Set(status)
	accessor(obj).SetManagedFields(managed)
}

// ValidateUpdate checks the status written (the rest is the stored object's).
func (s statusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(accessor(obj), accessor(old), field.NewPath("metadata"))
	return append(errs, s.kind.status(obj)...)
}

// GetResetFields: the status subresource writes neither metadata nor spec.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(v1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("metadata"), fieldpath.MakePathOrDie("spec")),
	}
}

// Every kind of the group is a struct with ObjectMeta, Spec and Status.

func accessor(obj runtime.Object) metav1.Object {
	a, err := meta.Accessor(obj)
	if err != nil {
		panic(err) // every kind of the group has ObjectMeta
	}
	return a
}

func fieldOf(obj runtime.Object, name string) any {
	return reflect.ValueOf(obj).Elem().FieldByName(name).Interface()
}

func clearField(obj runtime.Object, name string) {
	f := reflect.ValueOf(obj).Elem().FieldByName(name)
	f.Set(reflect.Zero(f.Type()))
}

func copyField(obj, from runtime.Object, name string) {
	reflect.ValueOf(obj).Elem().FieldByName(name).Set(reflect.ValueOf(from.DeepCopyObject()).Elem().FieldByName(name))
}
