package fairness

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTurnsNeverRunMoreThanPerAtOnce(t *testing.T) {
	turns := NewTurns(2, time.Hour)
	var running, most atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			release, ok := turns.Take(context.Background(), "noisy")
			if !ok {
				t.Error("a turn was refused")
				return
			}
			n := running.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(time.Millisecond) // hold the turn while the others queue
			running.Add(-1)
			release()
		})
	}
	wg.Wait()
	if m := most.Load(); m != 2 {
		t.Fatalf("at most %d writers held a turn at once, want 2", m)
	}
	if n := turns.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held after every turn was given back, want 0", n)
	}
}

func TestTurnsBoundATenantNotOthers(t *testing.T) {
	turns := NewTurns(1, time.Hour)
	release, ok := turns.Take(context.Background(), "noisy")
	if !ok {
		t.Fatal("the first turn was refused")
	}
	other, ok := turns.Take(context.Background(), "quiet")
	if !ok {
		t.Fatal("another tenant waited for the noisy tenant's turn")
	}
	other()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, ok := turns.Take(ctx, "noisy"); ok {
		t.Fatal("a second writer of the tenant took a turn while its only one was held")
	}
	got := make(chan func())
	go func() {
		r, ok := turns.Take(context.Background(), "noisy")
		if ok {
			got <- r
		}
	}()
	release()
	select {
	case r := <-got:
		r()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting writer was not given the turn given back")
	}
	if n := turns.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held, want 0", n)
	}
}

func TestTurnsStuckWriterIsNotCounted(t *testing.T) {
	stuckAfter := 200 * time.Millisecond
	turns := NewTurns(1, stuckAfter)
	stuck, ok := turns.Take(context.Background(), "web")
	if !ok {
		t.Fatal("the first turn was refused")
	}
	// The writer holding the turn never gives it back in time (a client
	// that does not read): the next writer takes its place after stuckAfter,
	// and those after it are not delayed again by the stuck one.
	began := time.Now()
	for range 3 {
		r, ok := turns.Take(context.Background(), "web")
		if !ok {
			t.Fatal("a turn was refused")
		}
		r()
	}
	if waited := time.Since(began); waited < stuckAfter {
		t.Fatalf("the next writer waited %v, less than a stuck turn is counted (%v)", waited, stuckAfter)
	}
	// The stuck writer giving its uncounted turn back frees nothing twice.
	stuck()
	r1, ok := turns.Take(context.Background(), "web")
	if !ok {
		t.Fatal("a turn was refused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), stuckAfter/10)
	defer cancel()
	if _, ok := turns.Take(ctx, "web"); ok {
		t.Fatal("two writers held the tenant's one turn after a stuck turn was given back")
	}
	r1()
	if n := turns.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held, want 0", n)
	}
}

func TestTurnsWaitEndsWithTheRequest(t *testing.T) {
	turns := NewTurns(1, time.Hour)
	release, _ := turns.Take(context.Background(), "web")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() {
		_, ok := turns.Take(ctx, "web")
		done <- ok
	}()
	cancel()
	if <-done {
		t.Fatal("a writer whose request ended took a turn")
	}
	release()
	if n := turns.tenants.len(); n != 0 {
		t.Fatalf("%d tenants held after the waiter gave up and the turn was given back, want 0", n)
	}
	if NewTurns(0, time.Second) != nil {
		t.Fatal("turns for 0 writers bound something")
	}
	var none *Turns
	if r, ok := none.Take(context.Background(), "web"); !ok {
		t.Fatal("no turns refused a writer")
	} else {
		r()
	}
}

// BenchmarkTurnsContended: many watches of one tenant writing at once, as
// one write to an object a tenant's watches all watch makes them; each
// takes a turn, writes nothing and gives it back. What a turn costs beyond
// the write it orders (ns and allocations per turn) is what it adds to every
// event such a tenant's watches deliver.
func BenchmarkTurnsContended(b *testing.B) {
	turns := NewTurns(1, DefaultStuckAfter)
	ctx := context.Background()
	b.SetParallelism(32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			release, ok := turns.Take(ctx, "noisy")
			if !ok {
				b.Error("a turn was refused")
				return
			}
			release()
		}
	})
}
