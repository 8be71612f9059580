package quota

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
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
	add := func(inf cache.SharedIndexInformer, set func(*unstructured.Unstructured), del func(*unstructured.Unstructured)) error {
		return handle(inf, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { withObject(obj, set) },
			UpdateFunc: func(_, obj any) { withObject(obj, set) },
			DeleteFunc: func(obj any) {
				if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				withObject(obj, del)
			},
		})
	}
	if err := add(inf.Registrations, func(u *unstructured.Unstructured) {
		var r quotav1alpha1.ResourceRegistration
		if decode(u, &r) {
			l.SetRegistration(&r)
		}
	}, func(u *unstructured.Unstructured) { l.DeleteRegistration(u.GetName()) }); err != nil {
		return nil, err
	}
	if err := add(inf.Grants, func(u *unstructured.Unstructured) {
		var g quotav1alpha1.ResourceGrant
		if decode(u, &g) {
			l.SetGrant(&g)
		}
	}, func(u *unstructured.Unstructured) { l.DeleteGrant(u.GetNamespace(), u.GetName()) }); err != nil {
		return nil, err
	}
	setClaim := func(u *unstructured.Unstructured, check bool) {
		var c quotav1alpha1.ResourceClaim
		if decode(u, &c) {
			l.SetClaim(&c, check)
		}
	}
	if err := handle(inf.Claims, cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { withObject(obj, func(u *unstructured.Unstructured) { setClaim(u, true) }) },
		UpdateFunc: func(old, obj any) {
			// A resync hands the same object again: its object is looked up again.
			o, _ := old.(*unstructured.Unstructured)
			withObject(obj, func(u *unstructured.Unstructured) {
				setClaim(u, o != nil && o.GetResourceVersion() == u.GetResourceVersion())
			})
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			withObject(obj, func(u *unstructured.Unstructured) { l.DeleteClaim(u.GetNamespace(), u.GetName()) })
		},
	}); err != nil {
		return nil, err
	}
	return synced, add(inf.ClaimPolicies, func(u *unstructured.Unstructured) {
		var p quotav1alpha1.ClaimCreationPolicy
		if decode(u, &p) {
			l.SetClaimPolicy(CompileClaimPolicy(&p))
		}
	}, func(u *unstructured.Unstructured) { l.DeleteClaimPolicy(u.GetName()) })
}

func withObject(obj any, f func(*unstructured.Unstructured)) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		f(u)
	}
}

// decode converts u into out; the schema has validated it, so a failure is logged, not returned.
func decode(u *unstructured.Unstructured, out any) bool {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		klog.ErrorS(err, "Decoding a quota object", "kind", u.GetKind(), "namespace", u.GetNamespace(), "name", u.GetName())
		return false
	}
	return true
}
