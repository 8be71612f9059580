package mcprovider

import (
	"context"
	"errors"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// EnqueueFunc maps an object, as its project serves it, to what a
// controller reconciles for it in that project.
type EnqueueFunc func(obj client.Object) []reconcile.Request

// EnqueueObject reconciles the object itself.
func EnqueueObject(obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}}
}

// EnqueueControllerOf reconciles the object's controller (its owner reference
// with controller: true) when that is of the owner's kind: what a
// controller's Owns watches in controller-runtime.
func EnqueueControllerOf(owner schema.GroupKind) EnqueueFunc {
	return func(obj client.Object) []reconcile.Request {
		ref := metav1.GetControllerOf(obj)
		if ref == nil {
			return nil
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || gv.Group != owner.Group || ref.Kind != owner.Kind {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}}}
	}
}

// Source returns a source of obj's events in every Ready project, for a
// controller built with multicluster-runtime's builder (WatchesRawSource):
// each event is enqueued as requests of its own project (enqueue maps it),
// and a project that becomes Ready has its existing objects enqueued.
// Predicates filter events as they do a controller-runtime watch: an event
// is enqueued only if every predicate passes it. Objects a source is handed
// because they were already there (its start, a project become Ready) are
// create events with IsInInitialList set, as a newly engaged cluster's are.
//
// It is registered once per controller, however many projects there are,
// where a watch of the builder's (For, Owns, Watches) is started once per
// engaged project, and with it goroutines of multicluster-runtime's per
// project. With Options.DoNotEngage and Sources only, a controller costs
// nothing per project but its cached objects.
func (p *Provider) Source(obj client.Object, enqueue EnqueueFunc, predicates ...predicate.Predicate) source.TypedSource[mcreconcile.Request] {
	return &projectSource{p: p, obj: obj, enqueue: enqueue, predicates: predicates}
}

// projectSource is a Source of the provider.
type projectSource struct {
	p          *Provider
	obj        client.Object
	enqueue    EnqueueFunc
	predicates []predicate.Predicate

	mu       sync.Mutex
	queue    workqueue.TypedRateLimitingInterface[mcreconcile.Request]
	informer toolscache.SharedIndexInformer
}

var errStarted = errors.New("the source is started already")

// Start registers the source's handler on the shared informer until ctx ends.
func (s *projectSource) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
	inf, _, err := s.p.sharedInformer(ctx, s.obj)
	if err != nil {
		return err
	}
	d, err := s.p.dispatcherOf(inf)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.queue != nil {
		s.mu.Unlock()
		return errStarted
	}
	s.queue, s.informer = queue, inf
	s.mu.Unlock()
	s.p.addSource(s)
	reg, err := d.addEveryProject(s.handle)
	if err != nil {
		s.p.removeSource(s)
		return err
	}
	go func() { // one per source, not per project
		<-ctx.Done()
		_ = d.remove(reg)
		s.p.removeSource(s)
	}()
	return nil
}

// WaitForSync waits for the shared informer's first list.
func (s *projectSource) WaitForSync(ctx context.Context) error {
	s.mu.Lock()
	inf := s.informer
	s.mu.Unlock()
	if inf == nil {
		return errors.New("the source is not started")
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	return nil
}

// handle enqueues an event's object in its project, if that project is
// Ready and the predicates pass the event.
func (s *projectSource) handle(ev projectEvent) {
	obj, unknown := ev.obj, false
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, unknown = d.Obj, true
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	name, ok := s.p.projectByID(ev.id)
	if !ok || !s.passes(ev, o, unknown) {
		return
	}
	requests := s.enqueue(o)
	if old, ok := ev.old.(client.Object); ok && ev.typ == updated {
		// As controller-runtime's handlers do: an update also reconciles what
		// the old object mapped to (a controller reference changed or gone
		// leaves its former owner to reconcile); the queue folds repeats.
		requests = append(requests, s.enqueue(old)...)
	}
	for _, r := range requests {
		s.queue.Add(mcreconcile.Request{Request: r, ClusterName: multicluster.ClusterName(name)})
	}
}

// replay enqueues a project's objects: it has just become Ready.
func (s *projectSource) replay(id string) {
	s.mu.Lock()
	inf := s.informer
	s.mu.Unlock()
	if inf == nil {
		return
	}
	objs, err := inf.GetIndexer().ByIndex(projectIndex, id)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if o, ok := obj.(runtime.Object); ok {
			s.handle(projectEvent{id: id, typ: added, obj: unqualified(o), initial: true})
		}
	}
}

// passes reports whether every predicate passes the event of o.
// deleteStateUnknown: a deletion seen as a tombstone.
func (s *projectSource) passes(ev projectEvent, o client.Object, deleteStateUnknown bool) bool {
	for _, p := range s.predicates {
		var pass bool
		switch ev.typ {
		case added:
			pass = p.Create(event.CreateEvent{Object: o, IsInInitialList: ev.initial})
		case updated:
			old, ok := ev.old.(client.Object)
			if !ok {
				return false
			}
			pass = p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: o})
		case deleted:
			pass = p.Delete(event.DeleteEvent{Object: o, DeleteStateUnknown: deleteStateUnknown})
		}
		if !pass {
			return false
		}
	}
	return true
}
