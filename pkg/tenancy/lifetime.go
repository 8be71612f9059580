package tenancy

import (
	"context"
	"sync"
)

// Lifetimes ends every request of a project or an organization context when
// that tenant is deleted, so that no watch or other long-running request
// outlives the tenant it was admitted to. A watch opened in a project that is
// then deleted would otherwise keep streaming, and a watch in an
// organization's context would go on to show the objects of a later
// organization of the same name.
//
// It holds one entry per request in flight, nothing per tenant: a tenant with
// no request in flight has no entry.
type Lifetimes struct {
	mu       sync.Mutex
	requests map[lifetimeKey]map[*lifetime]struct{}
}

type lifetimeKey struct {
	kind Kind
	name string
}

type lifetime struct {
	cancel context.CancelCauseFunc
}

// ErrTenantGone is the cause of the context of a request whose tenant was deleted.
var ErrTenantGone = errTenantGone{}

type errTenantGone struct{}

func (errTenantGone) Error() string { return "the project or organization of this request was deleted" }

// NewLifetimes returns an empty registry.
func NewLifetimes() *Lifetimes {
	return &Lifetimes{requests: map[lifetimeKey]map[*lifetime]struct{}{}}
}

// Begin registers a request of tenant t and returns its context, which ends
// when the tenant is ended, and the function that unregisters it once the
// request is served. Register before checking that the tenant exists: a
// tenant deleted after the check ends the request; one deleted before it
// fails the check.
func (l *Lifetimes) Begin(ctx context.Context, t Tenant) (context.Context, func()) {
	if l == nil || (t.Kind != Project && t.Kind != Organization) {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	key, lt := lifetimeKey{t.Kind, t.Name}, &lifetime{cancel: cancel}
	l.mu.Lock()
	set := l.requests[key]
	if set == nil {
		set = map[*lifetime]struct{}{}
		l.requests[key] = set
	}
	set[lt] = struct{}{}
	l.mu.Unlock()
	return ctx, func() {
		l.mu.Lock()
		if set := l.requests[key]; set != nil {
			delete(set, lt)
			if len(set) == 0 {
				delete(l.requests, key)
			}
		}
		l.mu.Unlock()
		cancel(nil)
	}
}

// End ends every request in flight of tenant t. It is called when a Project or
// Organization is deleted, or replaced by another of the same name.
func (l *Lifetimes) End(t Tenant) {
	if l == nil {
		return
	}
	key := lifetimeKey{t.Kind, t.Name}
	l.mu.Lock()
	set := l.requests[key]
	delete(l.requests, key)
	l.mu.Unlock()
	for lt := range set {
		lt.cancel(ErrTenantGone)
	}
}
