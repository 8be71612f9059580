package fairness

import (
	"context"
	"runtime"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// DefaultSeats is how many requests of one tenant run at once by default:
// half the server's CPUs, at least one, so that one tenant's requests never
// keep every core busy. A seat held longer than SeatStuckAfter (a member on a
// slow link, a call back into the project) is no longer counted, so one seat
// does not let one slow request hold the project's others back for long.
func DefaultSeats() int {
	return max(1, runtime.GOMAXPROCS(0)/2)
}

// SeatStuckAfter is how long a seat is counted against its tenant before the
// tenant's next request may take its place. Long enough that a request
// working on a core (a large list being encoded) keeps its seat while it
// works; short enough that a request waiting on something else (a slow
// client, an admission webhook calling back into its own project) holds its
// tenant's other requests back only that long.
const SeatStuckAfter = 500 * time.Millisecond

// StuckSeatsPerSeat is how many requests of a tenant may be in flight, per
// seat, beyond those its seats count: a seat that stopped counting (after
// SeatStuckAfter) lets the next request in only while the tenant has fewer
// than that many in flight uncounted, so at most (1 + StuckSeatsPerSeat) ×
// its seats of one tenant's requests are past their wait, however slow its
// clients; the others wait, parked, 5 s at most.
const StuckSeatsPerSeat = 3

// seatWait is the longest a request waits for one of its tenant's seats
// before it is refused (429).
const seatWait = 5 * time.Second

// Seats bound how many requests of one tenant run at once; the tenant's
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
	queue
}

// NewSeats returns seats for per requests of each tenant at once, each
// counted for SeatStuckAfter at most; per 0 or less bounds nothing (nil).
func NewSeats(per int) *Seats {
	return newSeats(per, SeatStuckAfter, seatWait)
}

func newSeats(per int, stuckAfter, maxWait time.Duration) *Seats {
	if per <= 0 {
		return nil
	}
	s := &Seats{}
	s.init(per, stuckAfter, maxWait, StuckSeatsPerSeat*per, queueMetrics{waits: seatWaits, stuck: seatsStuck, tenants: seatTenants})
	return s
}

// Per is how many requests of one tenant run at once.
func (s *Seats) Per() int {
	if s == nil {
		return 0
	}
	return s.per
}

// Most is how many requests of one tenant may be past their wait at once,
// those that stopped counting included.
func (s *Seats) Most() int {
	if s == nil {
		return 0
	}
	return s.per + s.maxStuck
}

// Take waits until one of tenant's seats is free and takes it, and returns
// the function that frees it. It gives up (false) when ctx ends or after
// seatWait.
func (s *Seats) Take(ctx context.Context, tenant string) (release func(), ok bool) {
	if s == nil {
		return func() {}, true
	}
	release, ok, _ = s.take(ctx, tenant)
	if !ok {
		seatRefused.Inc()
	}
	return release, ok
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
	seatsStuck = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "milo_tenant_seats_stuck_total",
		Help:           "Seats no longer counted against their tenant because their request held one longer than a seat is counted (a slow client, a call back into the project).",
		StabilityLevel: metrics.ALPHA,
	})
	seatTenants = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "milo_tenant_seat_tenants",
		Help:           "Tenants with requests in flight or waiting for a seat. Tenants without are not held.",
		StabilityLevel: metrics.ALPHA,
	})
)

func init() {
	legacyregistry.MustRegister(seatWaits, seatRefused, seatsStuck, seatTenants)
}
