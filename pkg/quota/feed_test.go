package quota

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
)

func TestAsReadsGoTypesInPlaceAndConvertsUnstructured(t *testing.T) {
	grant := &quotav1alpha1.ResourceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "org-a", Name: "g"},
		Spec: quotav1alpha1.ResourceGrantSpec{ConsumerRef: quotav1alpha1.ConsumerRef{Kind: "Project", Name: "p"},
			Allowances: []quotav1alpha1.Allowance{{ResourceType: "t", Buckets: []quotav1alpha1.Bucket{{Amount: 3}}}}}}
	if got, ok := As[quotav1alpha1.ResourceGrant](grant); !ok || got != grant {
		t.Fatalf("a Go object is read in place: got %p, %v; want %p", got, ok, grant)
	}
	if got, ok := As[quotav1alpha1.ResourceGrant](cache.DeletedFinalStateUnknown{Key: "org-a/g", Obj: grant}); !ok || got != grant {
		t.Fatalf("a deleted object's last state is read: got %v, %v", got, ok)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": quotav1alpha1.SchemeGroupVersion.String(), "kind": "ResourceGrant",
		"metadata": map[string]any{"namespace": "org-a", "name": "g"},
		"spec": map[string]any{"consumerRef": map[string]any{"kind": "Project", "name": "p"},
			"allowances": []any{map[string]any{"resourceType": "t", "buckets": []any{map[string]any{"amount": int64(3)}}}}},
	}}
	got, ok := As[quotav1alpha1.ResourceGrant](u)
	if !ok || got.Name != "g" || got.Spec.ConsumerRef.Name != "p" || len(got.Spec.Allowances) != 1 || got.Spec.Allowances[0].Buckets[0].Amount != 3 {
		t.Fatalf("an unstructured grant converts: got %+v, %v", got, ok)
	}
	for _, obj := range []any{nil, (*quotav1alpha1.ResourceGrant)(nil), &quotav1alpha1.ResourceClaim{}, "g",
		&unstructured.Unstructured{Object: map[string]any{"spec": "not an object"}}} {
		if got, ok := As[quotav1alpha1.ResourceGrant](obj); ok {
			t.Errorf("As(%T) = %v, true; want false", obj, got)
		}
	}
}

// The ledger's handlers read the informers' Go objects, and the same
// objects unstructured, to the same effect.
func TestFeedHandlersReadEitherForm(t *testing.T) {
	for _, form := range []string{"typed", "unstructured"} {
		t.Run(form, func(t *testing.T) {
			l := NewLedger()
			h := handler(l.SetGrant, l.DeleteGrant)
			var obj any = &quotav1alpha1.ResourceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "org-a", Name: "g"},
				Spec: quotav1alpha1.ResourceGrantSpec{ConsumerRef: quotav1alpha1.ConsumerRef{Kind: KindOrganization, Name: "a"},
					Allowances: []quotav1alpha1.Allowance{{ResourceType: "t", Buckets: []quotav1alpha1.Bucket{{Amount: 2}, {Amount: 3}}}}}}
			if form == "unstructured" {
				raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
				if err != nil {
					t.Fatal(err)
				}
				obj = &unstructured.Unstructured{Object: raw}
			}
			h.OnAdd(obj, true)
			if !l.HasGrant(Consumer{Kind: KindOrganization, Name: "a"}, []string{"t"}) {
				t.Fatal("the grant was not recorded")
			}
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "org-a/g", Obj: obj})
			if l.HasGrant(Consumer{Kind: KindOrganization, Name: "a"}, []string{"t"}) {
				t.Fatal("the grant was not forgotten")
			}
			// Gone at a relist with its last state unknown: its key names it.
			h.OnAdd(obj, false)
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "org-a/g"})
			if l.HasGrant(Consumer{Kind: KindOrganization, Name: "a"}, []string{"t"}) {
				t.Fatal("the grant was not forgotten by its key")
			}
		})
	}
}
