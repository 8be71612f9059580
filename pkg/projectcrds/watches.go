package projectcrds

import (
	"context"
	"sync"
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
