package quota

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/hierarchy"
)

// Informers are the platform's quota objects the ledger is fed from: one
// informer per kind, whatever the number of projects.
type Informers struct {
	Registrations, Grants, Claims, ClaimPolicies cache.SharedIndexInformer
}

// Feed keeps l current with the informers' objects. The ledger holds what
// is stored once every returned function reports true (the handlers have
// seen the informers' first lists).
func Feed(l *Ledger, inf Informers) ([]cache.InformerSynced, error) {
	var synced []cache.InformerSynced
	handle := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
		reg, err := inf.AddEventHandler(h)
		if err == nil {
			synced = append(synced, reg.HasSynced)
		}
		return err
	}
	if err := handle(inf.Registrations, handler(l.SetRegistration, func(_, name string) { l.DeleteRegistration(name) })); err != nil {
		return nil, err
	}
	if err := handle(inf.Grants, handler(l.SetGrant, l.DeleteGrant)); err != nil {
		return nil, err
	}
	if err := handle(inf.Claims, cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if c, ok := As[quotav1alpha1.ResourceClaim](obj); ok {
				l.SetClaim(c, true)
			}
		},
		UpdateFunc: func(old, obj any) {
			// A resync hands the same object again: its object is looked up again.
			o, _ := As[quotav1alpha1.ResourceClaim](old)
			if c, ok := As[quotav1alpha1.ResourceClaim](obj); ok {
				l.SetClaim(c, o != nil && o.ResourceVersion == c.ResourceVersion)
			}
		},
		DeleteFunc: func(obj any) { deleted(obj, l.DeleteClaim) },
	}); err != nil {
		return nil, err
	}
	return synced, handle(inf.ClaimPolicies, handler(func(p *quotav1alpha1.ClaimCreationPolicy) { l.SetClaimPolicy(CompileClaimPolicy(p)) },
		func(_, name string) { l.DeleteClaimPolicy(name) }))
}

// handler hands each object of an informer of T to set as it is added or
// updated (the informer's own object: set only reads it), and the
// namespace and name of each deleted one to del.
func handler[T any](set func(*T), del func(namespace, name string)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if t, ok := As[T](obj); ok {
				set(t)
			}
		},
		UpdateFunc: func(_, obj any) {
			if t, ok := As[T](obj); ok {
				set(t)
			}
		},
		DeleteFunc: func(obj any) { deleted(obj, del) },
	}
}

// deleted hands the namespace and name of a deleted object to del.
func deleted(obj any, del func(namespace, name string)) {
	if ns, name, ok := DeletedName(obj); ok {
		del(ns, name)
	}
}

// DeletedName is the namespace and name of an object a DeleteFunc was
// handed, whatever its form: the object, its last state, or only its key
// (a relist found it gone, its last state unknown).
func DeletedName(obj any) (namespace, name string, ok bool) {
	if d, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb && d.Obj == nil {
		namespace, name, err := cache.SplitMetaNamespaceKey(d.Key)
		return namespace, name, err == nil
	}
	if m := hierarchy.Object(obj); m != nil {
		return m.GetNamespace(), m.GetName(), true
	}
	return "", "", false
}

// As returns obj, a quota object an informer holds or handed a handler (a
// deleted object's last state included), as its Go type T. The platform's
// informers hold the Go types (typedinformer), and the object returned is
// then the informer's own, to be read and not changed; an unstructured
// object is converted into a copy.
func As[T any](obj any) (*T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch o := obj.(type) {
	case *T:
		return o, o != nil
	case *unstructured.Unstructured:
		out := new(T)
		// The schema has validated it, so a failure is logged, not returned.
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			klog.ErrorS(err, "Decoding a quota object", "kind", o.GetKind(), "namespace", o.GetNamespace(), "name", o.GetName())
			return nil, false
		}
		return out, true
	}
	return nil, false
}
