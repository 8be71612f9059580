package fairness

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// DefaultCPUShare is the part of the server's CPUs one tenant's requests may
// keep busy on average by default (see Budget).
const DefaultCPUShare = 0.25

// budgetBurst is how many seconds of its rate a tenant banks while idle: an
// interactive burst (kubectl apply of a large manifest, an informer's first
// lists) spends it and never meets the budget.
const budgetBurst = 4 * time.Second

// budgetMaxDebt is how far into debt a tenant's charges go, in seconds of its
// rate: work already admitted (a watch's deliveries, long lists) is charged
// after the fact, and a tenant's refusals end at most this long after its
// load does.
const budgetMaxDebt = 10 * time.Second

// Budget charges each tenant for the CPU its requests use and refuses its
// next requests while it is in debt — a budget of CPU time, where API
// Priority and Fairness budgets concurrency. APF's seats bound how many
// requests run at once, not what each costs: one project's steady stream of
// writes, large lists or watch deliveries, each admitted at once, takes the
// cores every other project's requests wait for. A tenant earns Rate seconds
// per second, banks up to Burst of them, and spends each request's handler
// time (for a watch, the time its events take to write) discounted by what
// of it the process spent waiting (cpuShare); while its balance is negative,
// its requests are refused with 429 and a Retry-After the balance needs to
// recover. Nothing is held for a tenant whose balance is full: the buckets of
// tenants with recent requests only.
type Budget struct {
	rate, burst, maxDebt float64 // seconds, per second and banked
	now                  func() time.Time
	swept                atomic.Int64 // unix nanoseconds of the last sweep
	cpu                  cpuShare
	buckets              tenantMap[bucket]
}

// bucket is one tenant's balance (seconds) as of at.
type bucket struct {
	balance float64
	at      time.Time
}

// NewBudget returns a budget that lets each tenant keep share of the server's
// CPUs (GOMAXPROCS) busy; share 0 or less budgets nothing (nil).
func NewBudget(share float64) *Budget {
	if share <= 0 || math.IsNaN(share) {
		return nil
	}
	rate := share * float64(runtime.GOMAXPROCS(0))
	b := &Budget{rate: rate, burst: rate * budgetBurst.Seconds(), maxDebt: rate * budgetMaxDebt.Seconds(),
		now: time.Now}
	b.cpu.init(processCPU)
	b.buckets.init()
	return b
}

// Rate is the handler time, in seconds, each tenant earns per second.
func (b *Budget) Rate() float64 {
	if b == nil {
		return 0
	}
	return b.rate
}

// Admit tells whether tenant may make a request now, and if not, how long
// until its balance is positive again.
func (b *Budget) Admit(tenant string) (retryAfter time.Duration, ok bool) {
	if b == nil {
		return 0, true
	}
	s := b.buckets.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants[tenant]
	if t == nil {
		return 0, true
	}
	now := b.now()
	b.refill(t, now)
	if t.balance >= b.burst {
		delete(s.tenants, tenant)
		budgetTenants.Dec()
		return 0, true
	}
	if t.balance >= 0 {
		return 0, true
	}
	budgetRefused.Inc()
	return time.Duration(-t.balance / b.rate * float64(time.Second)), false
}

// Charge spends tenant's part of the server's CPU for d of handler time: d
// times the process's CPU per second of all tenants' handler time, as last
// measured (cpuShare).
func (b *Budget) Charge(tenant string, d time.Duration) {
	if b == nil || d <= 0 {
		return
	}
	now := b.now()
	cost := d.Seconds() * b.cpu.charge(d, now)
	budgetCharged.Add(cost)
	s := b.buckets.shard(tenant)
	s.mu.Lock()
	t := s.tenants[tenant]
	if t == nil {
		t = &bucket{balance: b.burst, at: now}
		s.tenants[tenant] = t
		budgetTenants.Inc()
	}
	b.refill(t, now)
	t.balance = max(t.balance-cost, -b.maxDebt)
	s.mu.Unlock()
	// Now and then forget the tenants whose balance is full again: they
	// are as if never charged. Every budgetSweep, the next charge sweeps
	// every shard.
	if last := b.swept.Load(); now.UnixNano()-last >= int64(budgetSweep) && b.swept.CompareAndSwap(last, now.UnixNano()) {
		for i := range b.buckets.shards {
			b.sweep(&b.buckets.shards[i], now)
		}
	}
}

// budgetSweep is how often the tenants whose balance has filled again are
// dropped, while the server has tenant requests.
const budgetSweep = 15 * time.Second

// sweep drops the tenants of s whose balance is full.
func (b *Budget) sweep(s *tenantShard[bucket], now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, t := range s.tenants {
		if b.refill(t, now); t.balance >= b.burst {
			delete(s.tenants, name)
			budgetTenants.Dec()
		}
	}
}

// refill credits t with what it earned since t.at, up to the burst.
func (b *Budget) refill(t *bucket, now time.Time) {
	if elapsed := now.Sub(t.at).Seconds(); elapsed > 0 {
		t.balance = min(b.burst, t.balance+elapsed*b.rate)
		t.at = now
	}
}

var (
	budgetRefused = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "milo_tenant_budget_refused_requests_total",
		Help:           "Requests of projects and organization contexts refused (429) because the tenant had spent its CPU budget (--tenant-cpu-share).",
		StabilityLevel: metrics.ALPHA,
	})
	budgetCharged = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "milo_tenant_budget_charged_seconds_total",
		Help:           "CPU time charged to tenants' budgets: requests' handler time (watches' write time) times the process's CPU per second of handler time.",
		StabilityLevel: metrics.ALPHA,
	})
	budgetTenants = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "milo_tenant_budget_tenants",
		Help:           "Tenants whose CPU budget is not full: those with recent requests. Tenants without are not held.",
		StabilityLevel: metrics.ALPHA,
	})
	budgetCPUPerHandlerSecond = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "milo_tenant_budget_cpu_per_handler_second",
		Help:           "The process's CPU seconds per second of tenants' handler time, as last measured: what a tenant's budget is charged per second its requests take.",
		StabilityLevel: metrics.ALPHA,
	})
)

func init() {
	legacyregistry.MustRegister(budgetRefused, budgetCharged, budgetTenants, budgetCPUPerHandlerSecond)
}
