package projectcrds

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
)

// watchEnds ends a project's watches of one of its own kinds when the
// project's CRD of that kind changes schema class or goes. Upstream ends
// every watch of a CRD whose schema changes (it tears the CRD's storage
// down), so that clients list again and see the objects as the new schema
// serves them. A class's handler here serves every project of the class and
// outlives one project's change, so the project's watches are ended apart:
// each watch is registered under its project's CRD with the class that
// serves it, and cancelled when the index sees that CRD in another class or
// removed. It holds one small record per open watch (bounded per project by
// --max-project-watches) and nothing per project or CRD otherwise.
type watchEnds struct {
	mu sync.Mutex
	// byCRD are the open watches by the store key of the CRD they serve.
	byCRD map[string]map[*openWatch]struct{}
}

// openWatch is one watch of a project's kind: the class serving it and
// how to end it.
type openWatch struct {
	class  Class
	cancel context.CancelFunc
}

// add registers a watch of the kind of the CRD at key, served by class; it
// returns the watch's context, ended when the CRD leaves the class, and
// what to call when the watch is over.
func (e *watchEnds) add(ctx context.Context, key string, class Class) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	w := &openWatch{class: class, cancel: cancel}
	e.mu.Lock()
	if e.byCRD == nil {
		e.byCRD = map[string]map[*openWatch]struct{}{}
	}
	if e.byCRD[key] == nil {
		e.byCRD[key] = map[*openWatch]struct{}{}
	}
	e.byCRD[key][w] = struct{}{}
	e.mu.Unlock()
	return ctx, func() {
		cancel()
		e.mu.Lock()
		delete(e.byCRD[key], w)
		if len(e.byCRD[key]) == 0 {
			delete(e.byCRD, key)
		}
		e.mu.Unlock()
	}
}

// changed ends the watches of the CRD at key that class does not serve
// ("" when the CRD is gone: all of them).
func (e *watchEnds) changed(key string, class Class) {
	e.mu.Lock()
	var ended []*openWatch
	for w := range e.byCRD[key] {
		if w.class != class {
			ended = append(ended, w)
		}
	}
	e.mu.Unlock()
	for _, w := range ended {
		w.cancel()
	}
}

// open reports how many watches are registered (for tests).
func (e *watchEnds) open() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ws := range e.byCRD {
		n += len(ws)
	}
	return n
}

// handler follows the index's CRDs for e (and for the reservations of
// creates, see admission.go).
func (s *Index) handler() cache.ResourceEventHandler {
	key := func(obj any) string {
		k, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return k
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if k, ok := allprojects.KeyOf(obj, true); ok && k.ID != "" {
				s.pending.seen(k.ID, k.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*entry)
			e, ok2 := newObj.(*entry)
			if ok1 && ok2 && old.class.class != e.class.class {
				s.watches.changed(key(e), e.class.class)
			}
		},
		DeleteFunc: func(obj any) { s.watches.changed(key(obj), "") },
	}
}

// creates are the project CRDs admitted for creation that the index has
// not seen yet, by project (storage id) and name, each until the index sees
// it or reservationTTL has passed: with the index's CRDs they make the count
// --max-project-crds bounds, so that parallel creates cannot pass it. A create
// refused after admission (a name taken, a later plugin's refusal) holds its
// place until the TTL; one of a name the project already has reserves
// nothing (its create fails).
type creates struct {
	mu        sync.Mutex
	byProject map[string]map[string]time.Time
	// now is the clock (tests set it).
	now func() time.Time
}

// reservationTTL is how long an admitted create counts before the index
// sees its CRD: far longer than the index takes to see a stored CRD (its
// informer follows etcd within milliseconds), short enough that a create
// refused after admission soon frees its place.
const reservationTTL = 10 * time.Second

// maxPendingProjects is how many projects may hold reservations before the
// expired ones of every project are dropped (a project whose create failed
// after admission may never create again).
const maxPendingProjects = 1024

// reserve counts the create of name in project against max, with the
// project's CRDs in the index (read by have, under the lock, so that a CRD
// the index takes in meanwhile is counted there or as reserved, never
// neither); false if it would pass max. It reserves a place only if keep.
// A name the project has already passes: storage refuses its create (409).
func (c *creates) reserve(project, name string, have func() []string, max int, keep bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	names := have()
	if slices.Contains(names, name) {
		return true
	}
	if c.byProject == nil {
		c.byProject = map[string]map[string]time.Time{}
	}
	if len(c.byProject) > maxPendingProjects {
		for p, pending := range c.byProject {
			for n, until := range pending {
				if !now.Before(until) {
					delete(pending, n)
				}
			}
			if len(pending) == 0 {
				delete(c.byProject, p)
			}
		}
	}
	pending := c.byProject[project]
	count := len(names)
	for n, until := range pending {
		switch {
		case !now.Before(until) || slices.Contains(names, n):
			delete(pending, n)
		case n != name:
			count++
		}
	}
	if count >= max {
		return false
	}
	if !keep {
		return true
	}
	if pending == nil {
		pending = map[string]time.Time{}
		c.byProject[project] = pending
	}
	pending[name] = now.Add(reservationTTL)
	return true
}

// seen drops the reservation of a CRD the index now holds.
func (c *creates) seen(project, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pending := c.byProject[project]; pending != nil {
		delete(pending, name)
		if len(pending) == 0 {
			delete(c.byProject, project)
		}
	}
}

func (c *creates) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}
