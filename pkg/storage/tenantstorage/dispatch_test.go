package tenantstorage

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"go.miloapis.com/milo/pkg/tenancy"
)

// BenchmarkEventDispatch measures delivering one event to one project's watcher
// while many watchers are open in other projects. With the tenant index, an event
// is offered only to its own project's watchers, so the time per event does not
// grow with the number of watchers elsewhere.
//
// The "all-projects" variant opens the other watchers on the all-projects view
// instead, which must see every event: it shows the cost the index avoids.
//
//	go test ./pkg/storage/tenantstorage -run '^$' -bench EventDispatch -benchtime 2000x
func BenchmarkEventDispatch(b *testing.B) {
	for _, others := range []int{10, 10000} {
		b.Run(fmt.Sprintf("watchers-in-other-projects=%d", others), func(b *testing.B) {
			benchmarkDispatch(b, others, func(i int) context.Context { return in(fmt.Sprintf("other-%d", i)) })
		})
	}
	for _, others := range []int{10, 10000} {
		b.Run(fmt.Sprintf("all-projects-watchers=%d", others), func(b *testing.B) {
			all := tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant)
			benchmarkDispatch(b, others, func(int) context.Context { return all })
		})
	}
}

var benchSeq int

func benchmarkDispatch(b *testing.B, others int, ctxFor func(i int) context.Context) {
	benchSeq++
	resource := fmt.Sprintf("dispatch%d", benchSeq)
	prefix := "/" + resource
	s, _ := newConfigMapStorage(b, resource)
	pred := storage.Everything
	pred.GetAttrs = storage.DefaultNamespaceScopedAttr
	opts := storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: pred}

	var watchers []watch.Interface
	b.Cleanup(func() {
		for _, w := range watchers {
			w.Stop()
		}
	})
	drain := func(w watch.Interface) {
		for range w.ResultChan() {
		}
	}
	for i := range others {
		w, err := s.Watch(ctxFor(i), prefix, opts)
		if err != nil {
			b.Fatal(err)
		}
		watchers = append(watchers, w)
		go drain(w)
	}
	target, err := s.Watch(in("target"), prefix, opts)
	if err != nil {
		b.Fatal(err)
	}
	watchers = append(watchers, target)

	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ticker"}, Data: map[string]string{"n": "0"}}
	if err := s.Create(in("target"), prefix+"/default/ticker", obj, &corev1.ConfigMap{}, 0); err != nil {
		b.Fatal(err)
	}
	<-target.ResultChan()

	b.ResetTimer()
	for i := range b.N {
		err := s.GuaranteedUpdate(in("target"), prefix+"/default/ticker", &corev1.ConfigMap{}, false, nil,
			func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
				cm := input.(*corev1.ConfigMap).DeepCopy()
				cm.Data["n"] = fmt.Sprint(i + 1) // a change, or the write is skipped
				return cm, nil, nil
			}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if ev := <-target.ResultChan(); ev.Type != watch.Modified {
			b.Fatalf("event %v", ev)
		}
	}
}
