package fairness

import (
	"context"
	"time"

	"k8s.io/component-base/metrics"
)

// queue is what Seats and Turns are made of: at most per holders for each
// tenant, the tenant's others waiting first come first served. A holder
// counted longer than stuckAfter is no longer counted, and the next waiting
// takes its place: what is held that long waits for something else than a
// core (a client that does not read or does not send, a call back into the
// tenant's own project), so one such holder delays its tenant's other
// requests by stuckAfter once, not for as long as it lasts. A queue may bound
// how many such holders of a tenant are in flight (maxStuck), so that what
// one tenant has in flight stays bounded too. Nothing is held for a tenant
// with nothing in flight or waiting.
type queue struct {
	per        int
	stuckAfter time.Duration
	// maxWait, when not 0, is the longest a waiter waits before it gives up.
	maxWait time.Duration
	// maxStuck, when not 0, is how many holders of one tenant may be in
	// flight uncounted: past it, old holders go on counting, so that the
	// tenant's holders in flight stay bounded (per + maxStuck).
	maxStuck int
	tenants  tenantMap[queueOf]
	counts   queueMetrics
}

// queueMetrics are a queue's counters: waits, holders no longer counted,
// and the tenants held.
type queueMetrics struct {
	waits, stuck *metrics.Counter
	tenants      *metrics.Gauge
}

// queueOf is one tenant's holders and those waiting, in order.
type queueOf struct {
	holding []*place
	waiting []*place
	// stuck is how many holders no longer counted are still in flight.
	stuck int
	// timer wakes the tenant's queue when its oldest counted holder has
	// held its place for stuckAfter, while some wait (armed): one timer for
	// the tenant, reused, not one per waiter, since a waiter is only ever
	// given a place when a holder ends or stops counting. A thousand watches
	// waiting for their turn at every event would otherwise make and stop a
	// thousand timers.
	timer *time.Timer
	armed bool
}

// place is one holder's place: held since a time, or, while waiting, waiting
// since a time, and the channel it is handed over on.
type place struct {
	since  time.Time
	given  chan struct{}
	counts bool // still counted among the tenant's holders
	stuck  bool // held, no longer counted, not given back yet
}

func (q *queue) init(per int, stuckAfter, maxWait time.Duration, maxStuck int, m queueMetrics) {
	q.per, q.stuckAfter, q.maxWait, q.maxStuck, q.counts = per, stuckAfter, maxWait, maxStuck, m
	q.tenants.init()
}

// take waits for one of tenant's places and returns the function that gives
// it back, or false if ctx ended (timedOut false) or maxWait passed (true).
func (q *queue) take(ctx context.Context, tenant string) (release func(), ok, timedOut bool) {
	sh := q.tenants.shard(tenant)
	sh.mu.Lock()
	of := sh.tenants[tenant]
	if of == nil {
		of = &queueOf{}
		sh.tenants[tenant] = of
		q.counts.tenants.Inc()
	}
	mine := &place{}
	release = func() { q.release(sh, tenant, of, mine) }
	now := time.Now()
	if q.takeLocked(of, mine, now) {
		sh.mu.Unlock()
		return release, true, false
	}
	mine.since, mine.given = now, make(chan struct{})
	of.waiting = append(of.waiting, mine)
	q.armLocked(sh, tenant, of, now)
	sh.mu.Unlock()
	q.counts.waits.Inc()
	var deadline <-chan time.Time
	if q.maxWait > 0 {
		d := time.NewTimer(q.maxWait)
		defer d.Stop()
		deadline = d.C
	}
	select {
	case <-mine.given:
		return release, true, false
	case <-ctx.Done():
		q.giveUp(sh, tenant, of, mine)
		return nil, false, false
	case <-deadline:
		q.giveUp(sh, tenant, of, mine)
		return nil, false, true
	}
}

// armLocked sets of's timer, if some wait and it is not set, for when the
// first waiting will have waited stuckAfter behind a holder counted for as
// long: then that holder stops counting. Holders that maxStuck keeps
// counted wait for a stuck one to end instead (release).
func (q *queue) armLocked(sh *tenantShard[queueOf], tenant string, of *queueOf, now time.Time) {
	if of.armed || len(of.waiting) == 0 || len(of.holding) == 0 || (q.maxStuck > 0 && of.stuck >= q.maxStuck) {
		return
	}
	from := of.waiting[0].since
	oldest := of.holding[0].since
	for _, h := range of.holding[1:] {
		if h.since.Before(oldest) {
			oldest = h.since
		}
	}
	if oldest.After(from) {
		from = oldest
	}
	of.armed = true
	d := max(0, from.Add(q.stuckAfter).Sub(now))
	if of.timer == nil {
		of.timer = time.AfterFunc(d, func() { q.stuckDue(sh, tenant, of) })
		return
	}
	of.timer.Reset(d)
}

// stuckDue stops counting of's holders that held their places for
// stuckAfter once the first waiting has waited as long, gives their places
// to the first waiting, and sets the timer again for the next.
func (q *queue) stuckDue(sh *tenantShard[queueOf], tenant string, of *queueOf) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	of.armed = false
	if sh.tenants[tenant] != of {
		return // forgotten since: nothing of it in flight
	}
	// Set for an earlier first waiting (given a place since, or gone), the
	// timer may fire before the first waiting now has waited stuckAfter:
	// then it is only set again.
	now := time.Now()
	if len(of.waiting) > 0 && now.Sub(of.waiting[0].since) >= q.stuckAfter && q.uncountStuckLocked(of, now) {
		q.handOverLocked(of)
	}
	q.armLocked(sh, tenant, of, now)
}

// giveUp takes a waiter that stops waiting out of the queue, or, if it was
// handed a place as its wait ended, passes the place on.
func (q *queue) giveUp(sh *tenantShard[queueOf], tenant string, of *queueOf, mine *place) {
	sh.mu.Lock()
	if q.dropWaiterLocked(of, mine) {
		q.forgetLocked(sh, tenant, of)
		sh.mu.Unlock()
		return
	}
	sh.mu.Unlock()
	q.release(sh, tenant, of, mine)
}

// takeLocked counts p among of's holders if a place is free.
func (q *queue) takeLocked(of *queueOf, p *place, now time.Time) bool {
	if len(of.holding) >= q.per {
		return false
	}
	p.since, p.counts = now, true
	of.holding = append(of.holding, p)
	return true
}

// uncountStuckLocked stops counting the holders counted longer than
// stuckAfter, as many as maxStuck allows, and tells whether it stopped
// counting any.
func (q *queue) uncountStuckLocked(of *queueOf, now time.Time) bool {
	kept := of.holding[:0]
	for _, h := range of.holding {
		if now.Sub(h.since) >= q.stuckAfter && (q.maxStuck == 0 || of.stuck < q.maxStuck) {
			h.counts, h.stuck = false, true
			of.stuck++
			q.counts.stuck.Inc()
			continue
		}
		kept = append(kept, h)
	}
	clear(of.holding[len(kept):])
	stuck := len(kept) < len(of.holding)
	of.holding = kept
	return stuck
}

// dropWaiterLocked takes p out of of's waiters, if it is there.
func (q *queue) dropWaiterLocked(of *queueOf, p *place) bool {
	for i, x := range of.waiting {
		if x == p {
			of.waiting = append(of.waiting[:i], of.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// release gives p's place back: to the first waiting, or free. A place no
// longer counted (stuck) gives back no counted place; where stuck holders are
// bounded, it makes room for another to stop counting.
func (q *queue) release(sh *tenantShard[queueOf], tenant string, of *queueOf, p *place) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !p.counts {
		if p.stuck {
			// A holder no longer counted ends: another may stop counting
			// in its stead, if maxStuck held one counted.
			p.stuck = false
			of.stuck--
			now := time.Now()
			if q.maxStuck > 0 && len(of.waiting) > 0 && q.uncountStuckLocked(of, now) {
				q.handOverLocked(of)
			}
			q.armLocked(sh, tenant, of, now)
		}
		q.forgetLocked(sh, tenant, of)
		return
	}
	p.counts = false
	for i, h := range of.holding {
		if h == p {
			of.holding = append(of.holding[:i], of.holding[i+1:]...)
			break
		}
	}
	q.handOverLocked(of)
	q.forgetLocked(sh, tenant, of)
}

// handOverLocked gives the free places to the first waiting.
func (q *queue) handOverLocked(of *queueOf) {
	for len(of.waiting) > 0 && len(of.holding) < q.per {
		next := of.waiting[0]
		of.waiting[0] = nil
		of.waiting = of.waiting[1:]
		q.takeLocked(of, next, time.Now())
		close(next.given)
	}
}

// forgetLocked drops of once nothing of it is in flight or waiting.
func (q *queue) forgetLocked(sh *tenantShard[queueOf], tenant string, of *queueOf) {
	if len(of.holding) == 0 && len(of.waiting) == 0 && of.stuck == 0 && sh.tenants[tenant] == of {
		delete(sh.tenants, tenant)
		q.counts.tenants.Dec()
		if of.timer != nil {
			of.timer.Stop()
			of.armed = false
		}
	}
}
