package fairness

import (
	"context"
	"runtime"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// DefaultSeats is how many requests of one tenant run at once by default:
// half the server's CPUs, at least four. A seat is held while the request's
// body arrives and its answer is written, so one member on a slow link holds
// one; four leave the project's other clients (its controllers) room.
func DefaultSeats() int {
	return max(4, runtime.GOMAXPROCS(0)/2)
}

// seatWait is the longest a request waits for one of its tenant's seats
// before it is refused (429).
const seatWait = 5 * time.Second

// Seats bounds how many requests of one tenant run at once; the tenant's
// further requests wait, first come first served, for one of its seats.
//
// A budget (Budget) bounds what a tenant spends on average, over seconds;
// seats bound what it takes at any one moment. API Priority and Fairness's
// seats are a priority level's, shared by all its flows, and queue nothing
// until they are all taken — on a small server, long after one tenant's
// concurrent requests have taken every core. A tenant's seats are a share
// of the cores: with one seat on two cores, one project's flood of writes or
// lists keeps at most one core busy in its handlers, and another project's
// request finds the other free. Long-running requests (watches) hold no seat.
// Nothing is held for a tenant without requests in flight.
type Seats struct {
	per     int
	tenants tenantMap[seated]
}

// seated is one tenant's requests in flight and those waiting, in order.
type seated struct {
	running int
	waiting []chan struct{}
}

// NewSeats returns seats for per requests of each tenant at once; per 0 or
// less bounds nothing (nil).
func NewSeats(per int) *Seats {
	if per <= 0 {
		return nil
	}
	s := &Seats{per: per}
	s.tenants.init()
	return s
}

// Per is how many requests of one tenant run at once.
func (s *Seats) Per() int {
	if s == nil {
		return 0
	}
	return s.per
}

// Take waits until one of tenant's seats is free and takes it, and returns
// the function that frees it. It gives up (false) when ctx ends or after
// seatWait.
func (s *Seats) Take(ctx context.Context, tenant string) (release func(), ok bool) {
	if s == nil {
		return func() {}, true
	}
	sh := s.tenants.shard(tenant)
	sh.mu.Lock()
	t := sh.tenants[tenant]
	if t == nil {
		t = &seated{}
		sh.tenants[tenant] = t
		seatTenants.Inc()
	}
	release = func() { s.release(sh, tenant, t) }
	if t.running < s.per {
		t.running++
		sh.mu.Unlock()
		return release, true
	}
	turn := make(chan struct{})
	t.waiting = append(t.waiting, turn)
	sh.mu.Unlock()
	seatWaits.Inc()
	timer := time.NewTimer(seatWait)
	defer timer.Stop()
	select {
	case <-turn:
		return release, true
	case <-ctx.Done():
	case <-timer.C:
	}
	sh.mu.Lock()
	for i, w := range t.waiting {
		if w == turn {
			t.waiting = append(t.waiting[:i], t.waiting[i+1:]...)
			sh.mu.Unlock()
			seatRefused.Inc()
			return nil, false
		}
	}
	// The seat was handed over as the wait ended: pass it on.
	sh.mu.Unlock()
	release()
	seatRefused.Inc()
	return nil, false
}

// release hands t's seat to its first waiting request, or frees it.
func (s *Seats) release(sh *tenantShard[seated], tenant string, t *seated) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(t.waiting) > 0 {
		close(t.waiting[0])
		t.waiting[0] = nil
		t.waiting = t.waiting[1:]
		return
	}
	if t.running--; t.running == 0 {
		delete(sh.tenants, tenant)
		seatTenants.Dec()
	}
}

var (
	seatWaits = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "milo_tenant_seat_waits_total",
		Help:           "Requests of projects and organization contexts that waited for one of their tenant's seats (--tenant-concurrency).",
		StabilityLevel: metrics.ALPHA,
	})
	seatRefused = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "milo_tenant_seat_refused_requests_total",
		Help:           "Requests of projects and organization contexts refused (429) after waiting the longest for one of their tenant's seats.",
		StabilityLevel: metrics.ALPHA,
	})
	seatTenants = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "milo_tenant_seat_tenants",
		Help:           "Tenants with requests in flight or waiting for a seat. Tenants without are not held.",
		StabilityLevel: metrics.ALPHA,
	})
)

func init() {
	legacyregistry.MustRegister(seatWaits, seatRefused, seatTenants)
}
