package tenancy

import (
	"sync"
)

// DefaultMaxWatches is how many watches one project or organization context
// may hold open at once by default: more than the informers of a project's
// controllers and its users' `kubectl get -w` need, few enough that one
// write to a watched object does not wake so many watchers at once that
// another project's requests wait behind them (docs/fairness.md).
const DefaultMaxWatches = 250

// WatchLimit bounds the watches each tenant holds open at once. Each open
// watch costs the server goroutines and buffers for as long as it lasts, and
// every event of its resource a delivery; APF counts a watch only while it
// starts, so nothing else bounds how many one tenant keeps.
//
// It holds one counter per tenant with a watch open, nothing per tenant
// without one.
type WatchLimit struct {
	max  int
	mu   sync.Mutex
	open map[watchKey]int
}

// watchKey is a tenant: a project by its storage id (a project created again
// under the same name starts with none open), an organization by its name.
type watchKey struct {
	kind   Kind
	tenant string
}

// NewWatchLimit returns a limit of max open watches per tenant; max 0 means
// none (nil limits nothing).
func NewWatchLimit(max int) *WatchLimit {
	if max <= 0 {
		return nil
	}
	return &WatchLimit{max: max, open: map[watchKey]int{}}
}

// Max is the limit; 0 when there is none.
func (l *WatchLimit) Max() int {
	if l == nil {
		return 0
	}
	return l.max
}

// Acquire counts a watch of tenant t (a project by its storage id, an
// organization by its name) and returns the function that uncounts it, or
// false when t already holds the most it may.
func (l *WatchLimit) Acquire(t Tenant) (release func(), ok bool) {
	if l == nil {
		return func() {}, true
	}
	key := watchKey{t.Kind, t.Name}
	if t.Kind == Project && t.ID != "" {
		key.tenant = t.ID
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.max {
		return nil, false
	}
	l.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[key]--; l.open[key] <= 0 {
				delete(l.open, key)
			}
		})
	}, true
}

// tenants is how many tenants hold a watch open (for tests).
func (l *WatchLimit) tenants() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}
