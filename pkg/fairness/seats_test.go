package fairness

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSeatsBoundATenantNotOthers(t *testing.T) {
	s := NewSeats(2)
	ctx := context.Background()
	var held []func()
	for range 2 {
		release, ok := s.Take(ctx, "project/a")
		if !ok {
			t.Fatal("a tenant's first two requests wait")
		}
		held = append(held, release)
	}
	// Another tenant is not held back by the first's seats.
	other, ok := s.Take(ctx, "project/b")
	if !ok {
		t.Fatal("another tenant waits")
	}
	other()

	// A third request of a waits for a seat, and gets the first one freed.
	got := make(chan func())
	go func() {
		release, ok := s.Take(ctx, "project/a")
		if !ok {
			t.Error("the waiting request gave up")
		}
		got <- release
	}()
	select {
	case <-got:
		t.Fatal("a third request ran beside two")
	case <-time.After(50 * time.Millisecond):
	}
	held[0]()
	third := <-got
	third()
	held[1]()
	if n := s.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held with nothing in flight", n)
	}
}

func TestSeatsNeverRunMoreThanPerAtOnce(t *testing.T) {
	s := NewSeats(3)
	var running, most atomic.Int32
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			for range 50 {
				release, ok := s.Take(context.Background(), "project/a")
				if !ok {
					t.Error("a request gave up")
					return
				}
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				running.Add(-1)
				release()
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > 3 {
		t.Fatalf("%d requests ran at once, want at most 3", m)
	}
	if n := s.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held with nothing in flight", n)
	}
}

func TestSeatsWaitEndsWithTheRequest(t *testing.T) {
	s := NewSeats(1)
	release, _ := s.Take(context.Background(), "project/a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := s.Take(ctx, "project/a"); ok {
		t.Fatal("a request whose context ended took a seat")
	}
	release()
	// The gone waiter holds no seat: the next request runs at once.
	next, ok := s.Take(context.Background(), "project/a")
	if !ok {
		t.Fatal("the seat was lost to a request that gave up")
	}
	next()
	if n := s.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held with nothing in flight", n)
	}
	if NewSeats(0) != nil {
		t.Fatal("0 seats bound requests")
	}
	var none *Seats
	if r, ok := none.Take(context.Background(), "x"); !ok || r == nil {
		t.Fatal("no seats wait")
	}
}

func TestSeatsStuckRequestIsNotCounted(t *testing.T) {
	stuckAfter := 200 * time.Millisecond
	s := newSeats(1, stuckAfter, time.Hour)
	// A request that holds the tenant's one seat and does not end (a body
	// that never finishes arriving): the next request takes its place after
	// stuckAfter, and those after it are not delayed by it again.
	stuck, _ := s.Take(context.Background(), "project/a")
	began := time.Now()
	r, ok := s.Take(context.Background(), "project/a")
	if !ok {
		t.Fatal("the request after a stuck one was refused")
	}
	if waited := time.Since(began); waited < stuckAfter {
		t.Fatalf("the next request waited %v, less than a seat is counted (%v)", waited, stuckAfter)
	}
	// The one now counted keeps the seat while it is younger than stuckAfter.
	ctx, cancel := context.WithTimeout(context.Background(), stuckAfter/10)
	defer cancel()
	if _, ok := s.Take(ctx, "project/a"); ok {
		t.Fatal("two requests held the tenant's one seat")
	}
	r()
	// The stuck request ending frees nothing twice.
	stuck()
	r1, _ := s.Take(context.Background(), "project/a")
	ctx2, cancel2 := context.WithTimeout(context.Background(), stuckAfter/10)
	defer cancel2()
	if _, ok := s.Take(ctx2, "project/a"); ok {
		t.Fatal("two requests held the tenant's one seat after a stuck one ended")
	}
	r1()
	if n := s.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held with nothing in flight", n)
	}
}

func TestSeatsBoundWhatATenantHasInFlight(t *testing.T) {
	s := newSeats(1, 10*time.Millisecond, time.Second)
	ctx := context.Background()
	// Requests that never end (slow clients): each stops counting once the
	// next has waited for it, until the tenant has StuckSeatsPerSeat of them
	// in flight uncounted beside its one counted.
	var held []func()
	for i := range 1 + StuckSeatsPerSeat {
		r, ok := s.Take(ctx, "project/a")
		if !ok {
			t.Fatalf("request %d of %d refused", i+1, 1+StuckSeatsPerSeat)
		}
		held = append(held, r)
	}
	if _, ok := s.Take(ctx, "project/a"); ok {
		t.Fatalf("a request ran beside %d in flight, the most one seat allows", 1+StuckSeatsPerSeat)
	}
	// Another tenant is not held back.
	other, ok := s.Take(ctx, "project/b")
	if !ok {
		t.Fatal("another tenant waited")
	}
	other()
	// One that stopped counting ends: the next takes its place, once.
	held[0]()
	r, ok := s.Take(ctx, "project/a")
	if !ok {
		t.Fatal("the place of an ended request was not taken")
	}
	if _, ok := s.Take(ctx, "project/a"); ok {
		t.Fatal("one ended request let two in")
	}
	r()
	for _, h := range held[1:] {
		h()
		h() // given back twice: frees nothing twice
	}
	if n := s.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held with nothing in flight", n)
	}
}

func TestSeatsRefuseAfterTheLongestWait(t *testing.T) {
	s := newSeats(1, time.Hour, 30*time.Millisecond)
	held, _ := s.Take(context.Background(), "project/a")
	if _, ok := s.Take(context.Background(), "project/a"); ok {
		t.Fatal("a request took a seat held by a counted one")
	}
	held()
	if n := s.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held with nothing in flight", n)
	}
}

func TestCPUShareDiscountsWaiting(t *testing.T) {
	var cpu time.Duration
	c := &cpuShare{}
	c.init(func() (time.Duration, bool) { return cpu, true })
	at := time.Unix(1_000_000, 0)
	if f := c.charge(0, at); f != 1 {
		t.Fatalf("before any window: %v, want 1", f)
	}
	// A saturated server: 20 s of handler time (requests waiting for a
	// core) in a window of 1 s of CPU.
	c.charge(20*time.Second, at.Add(time.Millisecond))
	cpu += time.Second
	at = at.Add(cpuWindow)
	if f := c.charge(0, at); math.Abs(f-(1+0.05)/2) > 1e-9 { // half way from 1 to 0.05
		t.Fatalf("after 0.05 CPU seconds per handler second: %v, want %v", f, (1+0.05)/2)
	}
	// A long quiet spell measures the platform alone: discarded.
	before := c.charge(0, at.Add(time.Millisecond))
	cpu += time.Hour
	at = at.Add(time.Minute)
	c.charge(time.Millisecond, at)
	if f := c.charge(0, at.Add(time.Millisecond)); f != before {
		t.Fatalf("a stale window moved the ratio from %v to %v", before, f)
	}
	// Never above one: a few short requests on a server busy with its own
	// work pay their own time, no more.
	for range 10 {
		c.charge(time.Millisecond, at.Add(time.Millisecond))
		cpu += 10 * time.Second
		at = at.Add(cpuWindow)
		if f := c.charge(0, at); f > 1 {
			t.Fatalf("ratio %v above one", f)
		}
	}
	if f := c.charge(0, at); math.Abs(f-1) > 0.01 {
		t.Fatalf("a server busy with its own work: ratio %v, want about 1", f)
	}
}
