package typedgroup

import (
	"context"
	"reflect"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Strategy is the create, update and delete behaviour of one kind, that of a
// custom resource: with a status subresource, the main resource writes
// metadata and spec (a status sent with them is ignored) and the status
// subresource writes status only; the generation counts spec changes (every
// change but metadata's for a kind without the subresource).
type Strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	kind    Kind
	version schema.GroupVersion
	// prepare, if set, is called at the end of PrepareForCreate.
	prepare func(context.Context, runtime.Object)
}

// NewStrategy returns the strategy of k, a kind of version; prepare, if
// set, is called on each new object once it is prepared for its create.
func NewStrategy(version schema.GroupVersion, k Kind, prepare func(context.Context, runtime.Object)) Strategy {
	return Strategy{ObjectTyper: legacyscheme.Scheme, NameGenerator: names.SimpleNameGenerator, kind: k, version: version, prepare: prepare}
}

// NamespaceScoped reports whether the kind lives in namespaces.
func (s Strategy) NamespaceScoped() bool { return s.kind.Namespaced }

// PrepareForCreate drops the status a client sent (where a subresource
// writes it) and starts the generation.
func (s Strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	if !s.kind.StatusInMain {
		clearField(obj, "Status")
	}
	accessor(obj).SetGeneration(1)
	s.defaults(obj)
	if s.prepare != nil {
		s.prepare(ctx, obj)
	}
}

// PrepareForUpdate keeps the stored status (where a subresource writes it)
// and counts a change of what the main resource writes.
func (s Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	if !s.kind.StatusInMain {
		copyField(obj, old, "Status")
	}
	s.defaults(obj)
	generation := accessor(old).GetGeneration()
	if !s.sameContent(obj, old) {
		generation++
	}
	accessor(obj).SetGeneration(generation)
}

// sameContent reports whether obj and old hold the same spec (and status,
// for a kind whose main resource writes it).
func (s Strategy) sameContent(obj, old runtime.Object) bool {
	if !apiequality.Semantic.DeepEqual(fieldOf(obj, "Spec"), fieldOf(old, "Spec")) {
		return false
	}
	return !s.kind.StatusInMain || apiequality.Semantic.DeepEqual(fieldOf(obj, "Status"), fieldOf(old, "Status"))
}

// defaults are the scheme's, which decoding a request already applied: a
// write that did not come through decoding gets them too.
func (s Strategy) defaults(obj runtime.Object) { legacyscheme.Scheme.Default(obj) }

// Validate checks a new object.
func (s Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessor(accessor(obj), s.kind.Namespaced, s.kind.Name, field.NewPath("metadata"))
	return append(errs, s.kind.Spec(obj, nil)...)
}

// ValidateUpdate checks an update against the stored object. An unchanged
// spec is not checked again, as a custom resource's unchanged fields are
// not (validation ratcheting): an object stored under other rules can still
// have its metadata changed, its finalizers removed.
func (s Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(accessor(obj), accessor(old), field.NewPath("metadata"))
	errs = append(errs, apimachineryvalidation.ValidateObjectMetaAccessor(accessor(obj), s.kind.Namespaced, s.kind.Name, field.NewPath("metadata"))...)
	if s.sameContent(obj, old) {
		return errs
	}
	return append(errs, s.kind.Spec(obj, old)...)
}

// WarningsOnCreate has nothing to warn of.
func (Strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

// WarningsOnUpdate has nothing to warn of.
func (Strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// Canonicalize leaves the object as it is.
func (Strategy) Canonicalize(runtime.Object) {}

// AllowCreateOnUpdate: an update of a missing object is 404, as for a custom resource.
func (Strategy) AllowCreateOnUpdate() bool { return false }

// AllowUnconditionalUpdate: an update needs a resourceVersion, as for a custom resource.
func (Strategy) AllowUnconditionalUpdate() bool { return false }

// GetResetFields: the main resource does not write status where a
// subresource does.
func (s Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if s.kind.StatusInMain {
		return nil
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.version.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// StatusStrategy is the status subresource's: everything but status (and
// the managed fields that record the write) stays as stored.
type StatusStrategy struct{ Strategy }

// PrepareForUpdate takes the new status onto the stored object.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	status := reflect.ValueOf(fieldOf(obj, "Status"))
	managed := accessor(obj).GetManagedFields()
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(old.DeepCopyObject()).Elem())
	reflect.ValueOf(obj).Elem().FieldByName("Status").Set(status)
	accessor(obj).SetManagedFields(managed)
}

// ValidateUpdate checks the status written (the rest is the stored object's).
func (s StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(accessor(obj), accessor(old), field.NewPath("metadata"))
	return append(errs, s.kind.Status(obj, old)...)
}

// GetResetFields: the status subresource writes neither metadata nor spec.
func (s StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.version.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("metadata"), fieldpath.MakePathOrDie("spec")),
	}
}

func accessor(obj runtime.Object) metav1.Object {
	a, err := meta.Accessor(obj)
	if err != nil {
		panic(err) // every kind of a group has ObjectMeta
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
