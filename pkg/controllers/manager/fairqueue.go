package manager

import "k8s.io/client-go/util/workqueue"

// fairQueue orders a work queue's keys so that tenants take turns: every
// project (or organization) with work waiting has one key served in each
// round, whatever the others have queued, and its own keys stay in the order
// they came. A project that queues ten thousand keys (a namespace of ten
// thousand objects deleted) delays another project's one key by at most one
// key of each other tenant with work waiting, where a first-in-first-out
// queue made it wait for all ten thousand.
//
// It holds state only for tenants with keys waiting: a map entry and a slot
// in the round, dropped when their last key is taken. No goroutine or timer.
// It implements workqueue.Queue, which client-go's queue calls under its
// own lock (dirty and processing sets, metrics and rate limits stay its own).
type fairQueue[T comparable] struct {
	tenantOf func(T) string
	waiting  map[string]*fifo[T]
	round    fifo[string]
	n        int
}

var _ workqueue.Queue[string] = &fairQueue[string]{}

func newFairQueue[T comparable](tenantOf func(T) string) *fairQueue[T] {
	return &fairQueue[T]{tenantOf: tenantOf, waiting: map[string]*fifo[T]{}}
}

// Touch keeps a key added again where it is: its tenant's turn is not lost.
func (q *fairQueue[T]) Touch(T) {}

// Push queues item behind its tenant's other keys; a tenant with none joins
// the end of the round.
func (q *fairQueue[T]) Push(item T) {
	t := q.tenantOf(item)
	w, ok := q.waiting[t]
	if !ok {
		w = &fifo[T]{}
		q.waiting[t] = w
		q.round.push(t)
	}
	w.push(item)
	q.n++
}

func (q *fairQueue[T]) Len() int { return q.n }

// Pop takes the next key of the tenant whose turn it is; a tenant with more
// goes to the end of the round.
func (q *fairQueue[T]) Pop() T {
	t := q.round.pop()
	w := q.waiting[t]
	item := w.pop()
	q.n--
	if w.len() > 0 {
		q.round.push(t)
	} else {
		delete(q.waiting, t)
	}
	return item
}

// fifo is a first-in-first-out slice read from head: popped slots are
// cleared so that what they held can be collected, the slice is reused from
// its start once emptied, and its popped prefix is dropped once it is most
// of the slice.
type fifo[T any] struct {
	items []T
	head  int
}

func (f *fifo[T]) push(item T) { f.items = append(f.items, item) }

func (f *fifo[T]) pop() T {
	var zero T
	item := f.items[f.head]
	f.items[f.head] = zero
	f.head++
	switch {
	case f.head == len(f.items):
		f.items, f.head = f.items[:0], 0
	case f.head >= 64 && 2*f.head >= len(f.items):
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	return item
}

func (f *fifo[T]) len() int { return len(f.items) - f.head }

// tenantOf is the tenant a fair queue serves k in turn with: its project,
// else its organization, else the platform (""). A project and an
// organization of the same name share a turn, which costs them a little of
// their share and spares each key a string of its own.
func tenantOf[K Tenanted](k K) string {
	project, org := k.TenantKeys()
	if project != "" {
		return project
	}
	return org
}
