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
	queue
}

// NewTurns returns turns for per writers of each tenant at once; per 0 or
// less bounds nothing (nil).
func NewTurns(per int, stuckAfter time.Duration) *Turns {
	if per <= 0 {
		return nil
	}
	t := &Turns{}
	t.init(per, stuckAfter, 0, 0, queueMetrics{waits: turnWaits, stuck: turnsStuck, tenants: turnTenants})
	return t
}

// Take waits for one of tenant's turns and returns the function that gives
// it back, or false if ctx ended first.
func (t *Turns) Take(ctx context.Context, tenant string) (release func(), ok bool) {
	if t == nil {
		return func() {}, true
	}
	release, ok, _ = t.take(ctx, tenant)
	return release, ok
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
