package mcprovider

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/tenancy"
)

// BenchmarkCacheBytesPerProject measures what the shared cache keeps per
// project beyond what a controller-runtime cache keeps for the same objects:
// both hold, per project, the ConfigMaps a bench project holds (6, in two
// namespaces). "plain" is a controller-runtime informer's store (its index by
// namespace, each project's namespaces distinct); "shared" is the provider's
// (objects qualified, the index by project). extra-B/project is what the
// provider adds: the qualified namespaces and the project index, less the
// namespace index it does without and the id annotation values qualifying
// frees; it is negative when the provider keeps less than a plain cache.
func BenchmarkCacheBytesPerProject(b *testing.B) {
	const projects = 20000
	// objects are project p's: with its namespaces made distinct from other
	// projects' (as a plain cache of every project would need), as decoded,
	// or qualified by the provider's transform.
	const distinct, decoded, qualified = 0, 1, 2
	objects := func(p, form int) []any {
		id := tenancy.ProjectID(string(types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", p, p))))
		var out []any
		for i, at := range []struct{ ns, name string }{{"default", "kube-root-ca.crt"}, {"kube-system", "kube-root-ca.crt"},
			{"default", "bench-0"}, {"default", "bench-1"}, {"default", "bench-2"}, {"default", "bench-widget"}} {
			ns := strings.Clone(at.ns) // decoding allocates each object's own
			if form == distinct {
				ns = fmt.Sprintf("%s-%d", at.ns, p)
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: at.name, Namespace: ns,
				UID: types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", p, i)), ResourceVersion: "1",
				Annotations: map[string]string{tenancy.AnnotationKey: fmt.Sprint("project-", p), tenancy.IDAnnotationKey: strings.Clone(id)}}}
			if form == qualified {
				q, _ := qualify(cm)
				out = append(out, q)
			} else {
				out = append(out, cm)
			}
		}
		return out
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// fill returns the heap a store of every project's objects holds
	// beyond the objects themselves.
	fill := func(form int, indexers toolscache.Indexers) float64 {
		all := make([][]any, projects)
		for p := range all {
			all[p] = objects(p, form)
		}
		before := heap()
		store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, indexers)
		for _, objs := range all {
			for _, o := range objs {
				if err := store.Add(o); err != nil {
					b.Fatal(err)
				}
			}
		}
		after := heap()
		runtime.KeepAlive(store)
		runtime.KeepAlive(all)
		return (float64(after) - float64(before)) / projects
	}
	// The qualified namespace is allocated by the transform, outside the
	// store: count it as the provider's.
	qualifiedNamespaces := func() float64 {
		all := make([][]any, projects)
		for p := range all {
			all[p] = objects(p, decoded)
		}
		mid := heap()
		for _, objs := range all {
			for _, o := range objs {
				_, _ = qualify(o)
			}
		}
		after := heap()
		runtime.KeepAlive(all)
		return (float64(after) - float64(mid)) / projects
	}
	for range b.N {
		plain := fill(distinct, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
		shared := fill(qualified, toolscache.Indexers{projectIndex: indexByProject})
		qualifying := qualifiedNamespaces()
		b.ReportMetric(plain, "plain-B/project")
		b.ReportMetric(shared, "shared-B/project")
		b.ReportMetric(qualifying, "qualify-B/project")
		b.ReportMetric(shared+qualifying-plain, "extra-B/project")
	}
}
