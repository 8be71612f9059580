package fairness

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// cpuShare turns the handler time a tenant is charged for into CPU time.
//
// Go cannot tell the CPU one goroutine used; the CPU of the whole process it
// can. Over each window of at least cpuWindow, the process's CPU is divided by
// the handler time charged to tenants in it, and every tenant is charged that
// ratio for each second its requests take: each tenant pays its part of the
// process's CPU, in proportion to its part of the handler time. The ratio
// includes what requests cost outside their handlers — the embedded etcd's
// commits, the watch cache's decoding and fan-out, garbage collection — so a
// write flood is charged what it costs the server, not only what its
// handlers took; and on a saturated server, where a request's wall-clock time
// is mostly waiting — for a core, or for a connection's writer that a
// thousand watches share — it is below one, so waiting is not charged as
// work. The platform's own work (its controllers, superusers'
// requests) is in the process's CPU but not in the tenants' handler time;
// the ratio is bounded so that it cannot make a few short requests look
// expensive on a server busy with its own work.
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
	minCPUFactor, maxCPUFactor = 0.001, 4.0
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
