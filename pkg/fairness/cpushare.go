package fairness

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// cpuShare discounts the handler time a tenant is charged for by what of it
// was spent waiting.
//
// Go cannot tell the CPU one goroutine used; the CPU of the whole process it
// can. Over each window of at least cpuWindow, the process's CPU is divided by
// the handler time charged to tenants in it, and every tenant is charged that
// ratio, at most one, for each second its requests take. Where requests'
// wall-clock time is mostly waiting — for a core on a saturated server, for
// the writer of a connection that a thousand watches share, for storage —
// the ratio falls below one, and each tenant pays its part of the CPU the
// process actually used, in proportion to its part of the handler time,
// rather than its waits. It is never above one: the process's CPU includes
// the platform's own work (its controllers, superusers' requests) and work no
// request is charged for, which must not make one tenant's requests dearer
// because another tenant or the platform keeps the server busy.
type cpuShare struct {
	read    func() (time.Duration, bool) // the process's CPU time so far
	handler atomic.Int64                 // tenants' handler nanoseconds in this window
	factor  atomic.Uint64                // math.Float64bits of the ratio in use

	mu  sync.Mutex // held by the one charge that closes a window
	at  time.Time  // when this window began
	cpu time.Duration
}

const (
	// cpuWindow is the shortest window a ratio is measured over.
	cpuWindow = 500 * time.Millisecond
	// cpuStale: a window longer than this (no tenant charged meanwhile)
	// measured the platform alone; it is discarded, not used.
	cpuStale = 4 * cpuWindow
	// minCPUFactor and maxCPUFactor bound the ratio (see cpuShare). The
	// floor is far down: a thousand watches on one connection wait for its
	// writer in turn, and their writes' wall-clock time is mostly that wait.
	// The ceiling is one: a tenant never pays more than its requests' own
	// time, whatever else (the platform, another tenant's uncharged work)
	// keeps the process busy.
	minCPUFactor, maxCPUFactor = 0.001, 1.0
)

func (c *cpuShare) init(read func() (time.Duration, bool)) {
	c.read = read
	c.factor.Store(math.Float64bits(1))
	budgetCPUPerHandlerSecond.Set(1)
}

// charge records d of handler time at now and returns the ratio to charge
// it at.
func (c *cpuShare) charge(d time.Duration, now time.Time) float64 {
	c.handler.Add(int64(d))
	f := math.Float64frombits(c.factor.Load())
	if c.read == nil || !c.mu.TryLock() {
		return f
	}
	defer c.mu.Unlock()
	elapsed := now.Sub(c.at)
	if elapsed < cpuWindow {
		return f
	}
	cpu, ok := c.read()
	handler := c.handler.Swap(0)
	if ok && !c.at.IsZero() && elapsed <= cpuStale && handler > 0 {
		ratio := min(maxCPUFactor, max(minCPUFactor, float64(cpu-c.cpu)/float64(handler)))
		// Smoothed: one window's burst of long requests, all charged at
		// their end, moves the ratio half way.
		f = (f + ratio) / 2
		c.factor.Store(math.Float64bits(f))
		budgetCPUPerHandlerSecond.Set(f)
	}
	c.at, c.cpu = now, cpu
	return f
}
