package fairness

import (
	"context"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// DefaultStuckAfter is how long a turn is counted against its tenant before
// the tenant's next writer may take its place (Turns).
const DefaultStuckAfter = 250 * time.Millisecond

// Turns bound how many of one tenant's watches write an event at once; the
// tenant's other watches wait, first come first served, for a turn.
//
// Seats bound a tenant's requests, but a watch holds none: it is one request
// that runs for minutes. What a thousand watches of one project cost is
// their deliveries: one write to the project wakes each of them, and each
// encodes, writes and flushes the event into its connection, all at once.
// Goroutines are run first come first served, so another project's request
// that arrives in such a burst waits behind all of it. With turns, at most
// per of one tenant's watches write at a time and the rest wait, parked, so
// the burst is spread over time and another tenant's request runs beside it.
//
// A write blocks while the client does not read (HTTP/2 flow control, a full
// TCP buffer), and such a writer spends no CPU: a turn held longer than
// stuckAfter is no longer counted, and the next writer waiting takes its
// place, so one stuck client delays its tenant's other watches by stuckAfter
// once, not for as long as it is stuck. Nothing is held for a tenant none of
// whose watches is writing.
type Turns struct {
	per        int
	stuckAfter time.Duration
	tenants    tenantMap[turnsOf]
}

// turnsOf is one tenant's writers holding a turn and those waiting, in order.
type turnsOf struct {
	holding []*turn
	waiting []*turn
}

// turn is one writer's turn: held since a time, or, while waiting, the
// channel its turn is handed over on.
type turn struct {
	since  time.Time
	given  chan struct{}
	counts bool // still counted among the tenant's turns
}

// NewTurns returns turns for per writers of each tenant at once; per 0 or
// less bounds nothing (nil).
func NewTurns(per int, stuckAfter time.Duration) *Turns {
	if per <= 0 {
		return nil
	}
	t := &Turns{per: per, stuckAfter: stuckAfter}
	t.tenants.init()
	return t
}

// Take waits for one of tenant's turns and returns the function that gives
// it back, or false if ctx ended first.
func (t *Turns) Take(ctx context.Context, tenant string) (release func(), ok bool) {
	if t == nil {
		return func() {}, true
	}
	sh := t.tenants.shard(tenant)
	sh.mu.Lock()
	of := sh.tenants[tenant]
	if of == nil {
		of = &turnsOf{}
		sh.tenants[tenant] = of
		turnTenants.Inc()
	}
	mine := &turn{}
	if t.takeLocked(of, mine, time.Now()) {
		sh.mu.Unlock()
		return func() { t.release(sh, tenant, of, mine) }, true
	}
	mine.given = make(chan struct{})
	of.waiting = append(of.waiting, mine)
	sh.mu.Unlock()
	turnWaits.Inc()
	timer := time.NewTimer(t.stuckAfter)
	defer timer.Stop()
	for {
		select {
		case <-mine.given:
			return func() { t.release(sh, tenant, of, mine) }, true
		case <-ctx.Done():
			sh.mu.Lock()
			if t.dropWaiterLocked(of, mine) {
				t.forgetLocked(sh, tenant, of)
				sh.mu.Unlock()
				return nil, false
			}
			// Handed over as the wait ended: pass it on.
			sh.mu.Unlock()
			t.release(sh, tenant, of, mine)
			return nil, false
		case now := <-timer.C:
			sh.mu.Lock()
			if !mine.counts && t.uncountStuckLocked(of, now) {
				t.handOverLocked(of)
			}
			given := mine.counts
			sh.mu.Unlock()
			if given {
				return func() { t.release(sh, tenant, of, mine) }, true
			}
			timer.Reset(t.stuckAfter)
		}
	}
}

// takeLocked counts w among of's turns if one is free.
func (t *Turns) takeLocked(of *turnsOf, w *turn, now time.Time) bool {
	if len(of.holding) >= t.per {
		return false
	}
	w.since, w.counts = now, true
	of.holding = append(of.holding, w)
	return true
}

// uncountStuckLocked stops counting the turns held longer than stuckAfter,
// and tells whether it stopped counting any.
func (t *Turns) uncountStuckLocked(of *turnsOf, now time.Time) bool {
	kept := of.holding[:0]
	for _, h := range of.holding {
		if now.Sub(h.since) >= t.stuckAfter {
			h.counts = false
			turnsStuck.Inc()
			continue
		}
		kept = append(kept, h)
	}
	clear(of.holding[len(kept):])
	stuck := len(kept) < len(of.holding)
	of.holding = kept
	return stuck
}

// dropWaiterLocked takes w out of of's waiting writers, if it is there.
func (t *Turns) dropWaiterLocked(of *turnsOf, w *turn) bool {
	for i, x := range of.waiting {
		if x == w {
			of.waiting = append(of.waiting[:i], of.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// release gives w's turn back: to the first writer waiting, or free. A turn
// no longer counted (stuck) gives back nothing.
func (t *Turns) release(sh *tenantShard[turnsOf], tenant string, of *turnsOf, w *turn) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !w.counts {
		t.forgetLocked(sh, tenant, of)
		return
	}
	w.counts = false
	for i, h := range of.holding {
		if h == w {
			of.holding = append(of.holding[:i], of.holding[i+1:]...)
			break
		}
	}
	t.handOverLocked(of)
	t.forgetLocked(sh, tenant, of)
}

// handOverLocked gives the free turns to the first writers waiting.
func (t *Turns) handOverLocked(of *turnsOf) {
	for len(of.waiting) > 0 && len(of.holding) < t.per {
		next := of.waiting[0]
		of.waiting[0] = nil
		of.waiting = of.waiting[1:]
		t.takeLocked(of, next, time.Now())
		close(next.given)
	}
}

// forgetLocked drops of once it holds and awaits nothing. A stuck writer
// that gives its uncounted turn back later finds of gone from the map, and
// a new Take makes a new one: the two never meet.
func (t *Turns) forgetLocked(sh *tenantShard[turnsOf], tenant string, of *turnsOf) {
	if len(of.holding) == 0 && len(of.waiting) == 0 && sh.tenants[tenant] == of {
		delete(sh.tenants, tenant)
		turnTenants.Dec()
	}
}

var (
	turnWaits = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "milo_tenant_watch_turn_waits_total",
		Help:           "Watch events of projects and organization contexts that waited for one of their tenant's turns to be written (--tenant-concurrency).",
		StabilityLevel: metrics.ALPHA,
	})
	turnsStuck = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "milo_tenant_watch_turns_stuck_total",
		Help:           "Turns no longer counted against their tenant because their write waited longer than a turn may for its client to read.",
		StabilityLevel: metrics.ALPHA,
	})
	turnTenants = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "milo_tenant_watch_turn_tenants",
		Help:           "Tenants with a watch writing or waiting for its turn. Tenants without are not held.",
		StabilityLevel: metrics.ALPHA,
	})
)

func init() {
	legacyregistry.MustRegister(turnWaits, turnsStuck, turnTenants)
}
