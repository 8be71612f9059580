package mcprovider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"go.miloapis.com/milo/pkg/tenancy"
)

// configMap is a ConfigMap as the all-projects view serves it: with the
// annotations naming its project.
func configMap(project, namespace, name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, ResourceVersion: rv,
		Annotations: map[string]string{tenancy.AnnotationKey: project, tenancy.IDAnnotationKey: "p." + project}}}
}

// seen records what one handler was handed.
type seen struct {
	mu     sync.Mutex
	events []string
}

func (s *seen) add(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

// get returns the distinct events seen: a handler registered while the
// dispatcher's own first list is delivered may be handed an object twice.
func (s *seen) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]string(nil), s.events...)
	sort.Strings(out)
	return slices.Compact(out)
}

func (s *seen) handler() toolscache.ResourceEventHandler {
	name := func(obj any) string {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		m := obj.(metav1.Object)
		return m.GetNamespace() + "/" + m.GetName()
	}
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { s.add("add " + name(obj)) },
		UpdateFunc: func(_, obj any) { s.add("update " + name(obj)) },
		DeleteFunc: func(obj any) { s.add("delete " + name(obj)) },
	}
}

// runInformer runs a real shared informer, with the provider's transform,
// over a list of objs and a watch the test feeds. (A fake source keyed by
// namespace and name could not hold two projects' objects of the same name.)
func runInformer(t *testing.T, objs ...*corev1.ConfigMap) (*watch.FakeWatcher, toolscache.SharedIndexInformer) {
	t.Helper()
	w := watch.NewFakeWithChanSize(100, false)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
			for _, o := range objs {
				list.Items = append(list.Items, *o.DeepCopy())
			}
			return list, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil },
	}
	inf := toolscache.NewSharedIndexInformer(noWatchList{lw}, &corev1.ConfigMap{}, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	if err := inf.SetTransform(func(obj any) (any, error) { return qualify(obj) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go inf.Run(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	return w, inf
}

func waitSeen(t *testing.T, s *seen, want ...string) {
	t.Helper()
	sort.Strings(want)
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return fmt.Sprint(s.get()) == fmt.Sprint(want), nil
	})
	if err != nil {
		t.Fatalf("handler saw %v, want %v", s.get(), want)
	}
}

// An event of project A reaches A's handlers only, as A serves the object
// (its own namespace); a handler registered later is handed its project's
// existing objects, and no other project's.
func TestEventsReachTheirProjectOnly(t *testing.T) {
	source, inf := runInformer(t, configMap("a", "default", "x", "1"), configMap("b", "default", "x", "1"))
	d, err := newDispatcher(inf)
	if err != nil {
		t.Fatal(err)
	}
	var sa, sb, sa2 seen
	ra, err := projectInformer{d: d, id: "p.a"}.AddEventHandler(sa.handler())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (projectInformer{d: d, id: "p.b"}).AddEventHandler(sb.handler()); err != nil {
		t.Fatal(err)
	}
	waitSeen(t, &sa, "add default/x")
	waitSeen(t, &sb, "add default/x")

	source.Modify(configMap("a", "default", "x", "2"))
	source.Add(configMap("a", "team", "y", "3"))
	waitSeen(t, &sa, "add default/x", "update default/x", "add team/y")
	if _, err := (projectInformer{d: d, id: "p.a"}).AddEventHandler(sa2.handler()); err != nil {
		t.Fatal(err)
	}
	waitSeen(t, &sa2, "add default/x", "add team/y")

	source.Delete(configMap("a", "default", "x", "4"))
	waitSeen(t, &sa, "add default/x", "update default/x", "add team/y", "delete default/x")

	// Removed handlers see nothing more; removing twice is no error, and a
	// registration of another informer is refused.
	if err := (projectInformer{d: d, id: "p.a"}).RemoveEventHandler(ra); err != nil {
		t.Fatal(err)
	}
	if err := (projectInformer{d: d, id: "p.a"}).RemoveEventHandler(ra); err != nil {
		t.Fatal(err)
	}
	if err := (projectInformer{d: d, id: "p.a"}).RemoveEventHandler(struct {
		toolscache.ResourceEventHandlerRegistration
	}{}); err == nil {
		t.Fatal("a foreign registration was accepted")
	}
	source.Add(configMap("a", "default", "z", "5"))
	waitSeen(t, &sa2, "add default/x", "add team/y", "delete default/x", "add default/z")
	if got := sa.get(); len(got) != 4 {
		t.Fatalf("a removed handler saw %v", got)
	}
	if got := sb.get(); fmt.Sprint(got) != "[add default/x]" {
		t.Fatalf("project b's handler saw %v", got)
	}
}

// A project's list reads the shared indexes: by project (in one namespace
// or all), and by a field indexed for every project, never another
// project's objects. The shared informers keep the indexes controller-runtime
// asks for but the one by namespace.
func TestProjectListsReadTheSharedIndexes(t *testing.T) {
	field := func(obj any) ([]string, error) { // as controller-runtime keys a field index
		m := obj.(metav1.Object)
		v := m.GetName()[:1]
		return []string{m.GetNamespace() + "/" + v, "__all_namespaces/" + v}, nil
	}
	inf := listThenWatch(&toolscache.ListWatch{}, &corev1.ConfigMap{}, 0, toolscache.Indexers{
		toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc, "field:first": field})
	if err := inf.AddIndexers(toolscache.Indexers{projectIndex: indexByProject}); err != nil {
		t.Fatal(err)
	}
	indexer := inf.GetIndexer()
	if _, kept := indexer.GetIndexers()[toolscache.NamespaceIndex]; kept {
		t.Error("the shared informer keeps an index by namespace")
	}
	for _, o := range []*corev1.ConfigMap{configMap("a", "default", "x1", "1"), configMap("a", "team", "x2", "1"),
		configMap("a", "team", "y1", "1"), configMap("b", "default", "x1", "1"), configMap("b", "team", "x3", "1")} {
		q, _ := qualify(o)
		if err := indexer.Add(q); err != nil {
			t.Fatal(err)
		}
	}
	names := func(items []any, err error) string {
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, i := range items {
			out = append(out, i.(metav1.Object).GetName())
		}
		sort.Strings(out)
		return fmt.Sprint(out)
	}
	a := projectCache{id: "p.a"}
	for _, c := range []struct {
		opts client.ListOptions
		want string
	}{
		{client.ListOptions{}, "[x1 x2 y1]"},
		{client.ListOptions{Namespace: "team"}, "[x2 y1]"},
		{client.ListOptions{FieldSelector: fields.OneTermEqualSelector("first", "x")}, "[x1 x2]"},
		{client.ListOptions{Namespace: "team", FieldSelector: fields.OneTermEqualSelector("first", "x")}, "[x2]"},
	} {
		if got := names(a.candidates(indexer, c.opts)); got != c.want {
			t.Errorf("list %+v: %s, want %s", c.opts, got, c.want)
		}
	}
	if _, err := a.candidates(indexer, client.ListOptions{FieldSelector: fields.OneTermNotEqualSelector("first", "x")}); err == nil {
		t.Error("a list by a field that is not an exact match was accepted")
	}
}

// What one event costs the dispatcher does not grow with the number of
// engaged projects: compare 10 with 100,000 projects, each with a handler.
func BenchmarkDispatch(b *testing.B) {
	for _, projects := range []int{10, 100000} {
		b.Run(fmt.Sprintf("projects=%d", projects), func(b *testing.B) {
			d := &dispatcher{handlers: map[string]map[*registration]toolscache.ResourceEventHandler{}}
			var calls int
			h := toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, _ any) { calls++ }}
			for i := range projects {
				id := fmt.Sprintf("p.%d", i)
				d.handlers[id] = map[*registration]toolscache.ResourceEventHandler{{d: d, id: id}: h}
			}
			oldObj, _ := qualify(configMap("7", "default", "x", "1"))
			newObj, _ := qualify(configMap("7", "default", "x", "2"))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				d.OnUpdate(oldObj, newObj)
			}
			if calls != b.N {
				b.Fatalf("%d handler calls for %d events", calls, b.N)
			}
		})
	}
}

// The same event handed to one filtering handler per engaged project on the
// shared informer, as a provider that registers each project's watch there
// directly would: its cost grows with the number of projects.
func BenchmarkDispatchOneHandlerPerProject(b *testing.B) {
	for _, projects := range []int{10, 100000} {
		b.Run(fmt.Sprintf("projects=%d", projects), func(b *testing.B) {
			var calls int
			handlers := make([]toolscache.ResourceEventHandler, projects)
			for i := range projects {
				id := fmt.Sprintf("p.%d", i)
				handlers[i] = toolscache.FilteringResourceEventHandler{
					FilterFunc: func(obj any) bool { got, _ := idOf(obj); return got == id },
					Handler: toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
						_, _ = unqualifiedEvent(o), unqualifiedEvent(n)
						calls++
					}},
				}
			}
			oldObj, _ := qualify(configMap("7", "default", "x", "1"))
			newObj, _ := qualify(configMap("7", "default", "x", "2"))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for _, h := range handlers {
					h.OnUpdate(oldObj, newObj)
				}
			}
			if calls != b.N {
				b.Fatalf("%d handler calls for %d events", calls, b.N)
			}
		})
	}
}

// A Source enqueues each event as a request of its own project, only while
// the project is Ready (engaged in the provider), and a project that becomes
// Ready has its objects enqueued.
func TestSourceEnqueuesInTheEventsProject(t *testing.T) {
	owned := configMap("b", "default", "w-widget", "1")
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "widgets.samples.miloapis.example/v1alpha1", Kind: "Widget", Name: "w", Controller: ptr.To(true)}}
	w, inf := runInformer(t, configMap("a", "default", "x", "1"), owned)
	d, err := newDispatcher(inf)
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{names: map[string]string{"p.a": "a"}, sources: map[*projectSource]bool{}}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
	defer q.ShutDown()
	objects := &projectSource{p: p, obj: &corev1.ConfigMap{}, enqueue: EnqueueObject, queue: q, informer: inf}
	owners := &projectSource{p: p, obj: &corev1.ConfigMap{}, queue: q, informer: inf,
		enqueue: EnqueueControllerOf(schema.GroupKind{Group: "widgets.samples.miloapis.example", Kind: "Widget"})}
	for _, s := range []*projectSource{objects, owners} {
		p.sources[s] = true
		if _, err := d.addEveryProject(s.handle); err != nil {
			t.Fatal(err)
		}
	}
	// seen drains the queue until want has all come (repeats are allowed:
	// an object may be handed over by a replay and by the informer's first
	// list), failing on anything else.
	seen := map[string]bool{}
	expect := func(want ...string) {
		t.Helper()
		wanted := map[string]bool{}
		for _, w := range want {
			wanted[w] = true
		}
		err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			for q.Len() > 0 {
				r, _ := q.Get()
				q.Done(r)
				q.Forget(r)
				if !wanted[r.String()] && !seen[r.String()] {
					return false, fmt.Errorf("enqueued %s", r)
				}
				seen[r.String()] = true
			}
			for w := range wanted {
				if !seen[w] {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("waiting for %v: %v (seen %v)", want, err, seen)
		}
	}
	// Project b is not Ready: nothing of it is enqueued.
	expect("cluster://a/default/x")
	w.Add(configMap("a", "team", "y", "2"))
	expect("cluster://a/team/y")
	// b becomes Ready: its objects are enqueued, its owned object as its owner.
	p.names["p.b"] = "b"
	for _, s := range []*projectSource{objects, owners} {
		s.replay("p.b")
	}
	expect("cluster://b/default/w", "cluster://b/default/w-widget")
}

// A Source's predicates filter its events as they do a controller-runtime
// watch: each event type through its own function, an update with its old
// object, objects already there as creates in the initial list, a deletion
// seen as a tombstone with DeleteStateUnknown.
func TestSourcePredicatesFilterEvents(t *testing.T) {
	p := &Provider{names: map[string]string{"p.a": "a"}, sources: map[*projectSource]bool{}}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
	defer q.ShutDown()
	var saw []string
	record := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			saw = append(saw, fmt.Sprintf("create %s initial=%v", e.Object.GetName(), e.IsInInitialList))
			return e.Object.GetName() != "skip"
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			saw = append(saw, fmt.Sprintf("delete %s unknown=%v", e.Object.GetName(), e.DeleteStateUnknown))
			return true
		},
	}
	s := &projectSource{p: p, obj: &corev1.ConfigMap{}, enqueue: EnqueueObject, queue: q,
		predicates: []predicate.Predicate{predicate.GenerationChangedPredicate{}, record}}
	withGeneration := func(name string, g int64) *corev1.ConfigMap {
		c := configMap("a", "default", name, "1")
		c.Generation = g
		return c
	}
	enqueued := func() []string {
		var out []string
		for q.Len() > 0 {
			r, _ := q.Get()
			q.Done(r)
			q.Forget(r)
			out = append(out, r.String())
		}
		return out
	}
	for _, c := range []struct {
		ev   projectEvent
		want string
	}{
		{projectEvent{id: "p.a", typ: added, obj: withGeneration("x", 1), initial: true}, "[cluster://a/default/x]"},
		{projectEvent{id: "p.a", typ: added, obj: withGeneration("skip", 1)}, "[]"},
		{projectEvent{id: "p.a", typ: updated, old: withGeneration("x", 1), obj: withGeneration("x", 1)}, "[]"},
		{projectEvent{id: "p.a", typ: updated, old: withGeneration("x", 1), obj: withGeneration("x", 2)}, "[cluster://a/default/x]"},
		{projectEvent{id: "p.a", typ: deleted, obj: toolscache.DeletedFinalStateUnknown{Key: "default/x", Obj: withGeneration("x", 2)}}, "[cluster://a/default/x]"},
		{projectEvent{id: "p.b", typ: added, obj: withGeneration("y", 1)}, "[]"}, // b is not Ready
	} {
		s.handle(c.ev)
		if got := fmt.Sprint(enqueued()); got != c.want {
			t.Errorf("%+v: enqueued %s, want %s", c.ev, got, c.want)
		}
	}
	if want := "[create x initial=true create skip initial=false delete x unknown=true]"; fmt.Sprint(saw) != want {
		t.Errorf("the predicate saw %v, want %s", saw, want)
	}
	// An update reconciles the old object's owner too: its controller
	// reference moved from w1 to w2.
	owned := func(owner string) *corev1.ConfigMap {
		c := configMap("a", "default", "c", "1")
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "widgets.samples.miloapis.example/v1alpha1", Kind: "Widget", Name: owner, Controller: ptr.To(true)}}
		return c
	}
	owners := &projectSource{p: p, obj: &corev1.ConfigMap{}, queue: q,
		enqueue: EnqueueControllerOf(schema.GroupKind{Group: "widgets.samples.miloapis.example", Kind: "Widget"})}
	owners.handle(projectEvent{id: "p.a", typ: updated, old: owned("w1"), obj: owned("w2")})
	got := enqueued()
	sort.Strings(got)
	if fmt.Sprint(got) != "[cluster://a/default/w1 cluster://a/default/w2]" {
		t.Errorf("a ConfigMap whose owner changed enqueued %v, want both owners", got)
	}
}

// Qualified namespaces are unambiguous: a namespace named like its project's
// storage id (a project stored before storage ids has its name as its id) is
// qualified like any other, a cluster-scoped object gets "<id>/", and an
// object of no project is never taken for one.
func TestQualifiedNamespacesAreUnambiguous(t *testing.T) {
	legacy := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "foo",
		Annotations: map[string]string{tenancy.AnnotationKey: "foo"}}}
	clusterScoped := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team",
		Annotations: map[string]string{tenancy.AnnotationKey: "foo"}}}
	platform := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "foo"}}
	withID := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "y", Namespace: "default",
		Annotations: map[string]string{tenancy.AnnotationKey: "web", tenancy.IDAnnotationKey: "p-1234"}}}
	for _, c := range []struct {
		obj    metav1.Object
		ns, id string
	}{{legacy, "foo/foo", "foo"}, {clusterScoped, "foo/", "foo"}, {platform, "foo", ""}, {withID, "p-1234/default", "p-1234"}} {
		annotations := maps.Clone(c.obj.GetAnnotations())
		for range 2 { // applying it twice changes nothing
			if _, err := qualify(c.obj); err != nil {
				t.Fatal(err)
			}
		}
		// The annotations keep their values (one now shares the namespace's bytes).
		if !maps.Equal(c.obj.GetAnnotations(), annotations) {
			t.Errorf("%s: annotations %v after qualifying, want %v", c.obj.GetName(), c.obj.GetAnnotations(), annotations)
		}
		if c.obj.GetNamespace() != c.ns {
			t.Errorf("%s qualified into namespace %q, want %q", c.obj.GetName(), c.obj.GetNamespace(), c.ns)
		}
		if id, ok := idOf(c.obj); id != c.id && (ok || c.id != "") {
			t.Errorf("%s: project %q %v, want %q", c.obj.GetName(), id, ok, c.id)
		}
	}
	if got := unqualified(legacy).(metav1.Object).GetNamespace(); got != "foo" {
		t.Errorf("unqualified namespace %q, want foo", got)
	}
	tomb := unqualifiedEvent(toolscache.DeletedFinalStateUnknown{Key: "foo//team", Obj: clusterScoped}).(toolscache.DeletedFinalStateUnknown)
	if tomb.Key != "team" || tomb.Obj.(metav1.Object).GetNamespace() != "" {
		t.Errorf("tombstone of a cluster-scoped object: %q %q", tomb.Key, tomb.Obj.(metav1.Object).GetNamespace())
	}
}
