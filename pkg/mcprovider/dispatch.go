package mcprovider

import (
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
)

// dispatcher puts one handler on a shared informer and hands each event to
// the handlers registered for the event's project only, so that an event
// costs the same with 10 engaged projects as with 100,000. (Registering each
// project's handlers on the shared informer itself would make every event
// call every project's handlers.)
type dispatcher struct {
	informer toolscache.SharedIndexInformer

	mu   sync.RWMutex
	real toolscache.ResourceEventHandlerRegistration // nil until a project registers
	// handlers by project storage id.
	handlers map[string]map[*registration]toolscache.ResourceEventHandler
	// everyProject are handlers of every project's events (Provider.Source).
	everyProject map[*registration]func(projectEvent)
}

// eventType is what happened to the object of a projectEvent.
type eventType int

const (
	added eventType = iota
	updated
	deleted
)

// projectEvent is one event of a shared informer, handed to the handlers of
// every project: its objects as their project serves them.
type projectEvent struct {
	// id is the project's storage id.
	id  string
	typ eventType
	obj any
	old any // an update's previous object
	// initial: an object the handler is handed because it was already there
	// (the informer's first list, a handler added late, a project become
	// Ready), as client-go and controller-runtime mark them.
	initial bool
}

func newDispatcher(informer toolscache.SharedIndexInformer) (*dispatcher, error) {
	if err := informer.AddIndexers(toolscache.Indexers{projectIndex: indexByProject}); err != nil {
		return nil, err
	}
	return &dispatcher{informer: informer, handlers: map[string]map[*registration]toolscache.ResourceEventHandler{},
		everyProject: map[*registration]func(projectEvent){}}, nil
}

// registration is one handler of one project's view of the informer.
type registration struct {
	d  *dispatcher
	id string
}

var errForeignRegistration = errors.New("the registration is not one of this project's view of the informer")

// HasSynced is true once the shared informer has handed its first list to the
// dispatcher; the project's objects were handed to the handler when it registered.
func (r *registration) HasSynced() bool { return r.d.realRegistration().HasSynced() }

// HasSyncedChecker is HasSynced as a DoneChecker.
func (r *registration) HasSyncedChecker() toolscache.DoneChecker {
	return r.d.realRegistration().HasSyncedChecker()
}

func (d *dispatcher) realRegistration() toolscache.ResourceEventHandlerRegistration {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.real
}

// add registers h for the project with storage id id and hands it the
// project's objects already in the informer, as client-go does for a
// handler added to a running informer: the dispatcher's own handler had
// them long before.
func (d *dispatcher) add(id string, h toolscache.ResourceEventHandler) (*registration, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ensureRegistered(); err != nil {
		return nil, err
	}
	r := &registration{d: d, id: id}
	if d.handlers[id] == nil {
		d.handlers[id] = map[*registration]toolscache.ResourceEventHandler{}
	}
	d.handlers[id][r] = h
	// Under the lock, so that no event of the project reaches h before
	// its objects do.
	objs, err := d.informer.GetIndexer().ByIndex(projectIndex, id)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if o, ok := obj.(runtime.Object); ok {
			h.OnAdd(unqualified(o), true)
		}
	}
	return r, nil
}

// remove unregisters a handler; removing it twice is no error.
func (d *dispatcher) remove(handle toolscache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*registration)
	if !ok || r.d != d {
		return errForeignRegistration
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.everyProject, r)
	if hs := d.handlers[r.id]; hs != nil {
		delete(hs, r)
		if len(hs) == 0 {
			delete(d.handlers, r.id)
		}
	}
	return nil
}

// ensureRegistered puts the dispatcher's one handler on the informer. Its
// caller holds d.mu.
func (d *dispatcher) ensureRegistered() error {
	if d.real != nil {
		return nil
	}
	real, err := d.informer.AddEventHandler(d)
	if err != nil {
		return err
	}
	d.real = real
	return nil
}

// addEveryProject registers f for every project's events, each with its
// project's storage id and the objects as their project serves them, and
// hands it the objects already in the informer.
func (d *dispatcher) addEveryProject(f func(projectEvent)) (*registration, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ensureRegistered(); err != nil {
		return nil, err
	}
	r := &registration{d: d}
	d.everyProject[r] = f
	for _, obj := range d.informer.GetStore().List() {
		if o, ok := obj.(runtime.Object); ok {
			if id, ok := idOf(o); ok {
				f(projectEvent{id: id, typ: added, obj: unqualified(o), initial: true})
			}
		}
	}
	return r, nil
}

// targets returns the handlers of obj's project and of every project.
func (d *dispatcher) targets(obj any) (string, []toolscache.ResourceEventHandler, []func(projectEvent)) {
	id, ok := idOf(obj)
	if !ok {
		return "", nil, nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	hs := d.handlers[id]
	if len(hs) == 0 && len(d.everyProject) == 0 {
		return id, nil, nil
	}
	out := make([]toolscache.ResourceEventHandler, 0, len(hs))
	for _, h := range hs {
		out = append(out, h)
	}
	all := make([]func(projectEvent), 0, len(d.everyProject))
	for _, f := range d.everyProject {
		all = append(all, f)
	}
	return id, out, all
}

// OnAdd hands an added object to its project's handlers.
func (d *dispatcher) OnAdd(obj any, isInInitialList bool) {
	id, hs, all := d.targets(obj)
	if len(hs) == 0 && len(all) == 0 {
		return
	}
	o := unqualifiedEvent(obj)
	for _, h := range hs {
		h.OnAdd(o, isInInitialList)
	}
	for _, f := range all {
		f(projectEvent{id: id, typ: added, obj: o, initial: isInInitialList})
	}
}

// OnUpdate hands an updated object to its project's handlers (an object never
// changes project: its namespace, which holds the project, is immutable).
func (d *dispatcher) OnUpdate(oldObj, newObj any) {
	id, hs, all := d.targets(newObj)
	if len(hs) == 0 && len(all) == 0 {
		return
	}
	o, n := unqualifiedEvent(oldObj), unqualifiedEvent(newObj)
	for _, h := range hs {
		h.OnUpdate(o, n)
	}
	for _, f := range all {
		f(projectEvent{id: id, typ: updated, obj: n, old: o})
	}
}

// OnDelete hands a deleted object (or its tombstone) to its project's handlers.
func (d *dispatcher) OnDelete(obj any) {
	id, hs, all := d.targets(obj)
	if len(hs) == 0 && len(all) == 0 {
		return
	}
	o := unqualifiedEvent(obj)
	for _, h := range hs {
		h.OnDelete(o)
	}
	for _, f := range all {
		f(projectEvent{id: id, typ: deleted, obj: o})
	}
}

// projectInformer is one project's view of a shared informer: handlers added
// to it see that project's objects only, as the project serves them.
type projectInformer struct {
	d  *dispatcher
	id string
}

var _ crcache.Informer = projectInformer{}

// AddEventHandler registers h for the project's objects.
func (i projectInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.d.add(i.id, h)
}

// AddEventHandlerWithResyncPeriod is AddEventHandler: the shared informer
// does not resync per handler.
func (i projectInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, _ time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.d.add(i.id, h)
}

// AddEventHandlerWithOptions is AddEventHandler (see AddEventHandlerWithResyncPeriod).
func (i projectInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, _ toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.d.add(i.id, h)
}

// RemoveEventHandler unregisters a handler of this view.
func (i projectInformer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	return i.d.remove(handle)
}

// AddIndexers adds indexers to the shared informer: indexes span every
// project (Provider.IndexField).
func (i projectInformer) AddIndexers(indexers toolscache.Indexers) error {
	return i.d.informer.AddIndexers(indexers)
}

// HasSynced reports whether the shared informer has synced.
func (i projectInformer) HasSynced() bool { return i.d.informer.HasSynced() }

// HasSyncedChecker is HasSynced as a DoneChecker.
func (i projectInformer) HasSyncedChecker() toolscache.DoneChecker {
	return i.d.informer.HasSyncedChecker()
}

// IsStopped reports whether the shared informer has stopped.
func (i projectInformer) IsStopped() bool { return i.d.informer.IsStopped() }
