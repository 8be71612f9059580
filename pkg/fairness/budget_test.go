package fairness

import (
	"testing"
	"time"
)

// clock is a budget's clock the test moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func budgetAt(t *testing.T, share float64) (*Budget, *clock) {
	t.Helper()
	b := NewBudget(share)
	if b == nil {
		t.Fatalf("NewBudget(%v) = nil", share)
	}
	c := &clock{t: time.Unix(1_000_000, 0)}
	b.now = c.now
	b.cpu.read = nil // handler time charged as it is: the arithmetic alone
	return b, c
}

func TestBudgetRefusesATenantInDebtUntilItHasEarnedItBack(t *testing.T) {
	b, c := budgetAt(t, 0.25)
	rate := b.Rate()
	if _, ok := b.Admit("project/a"); !ok {
		t.Fatal("a tenant never charged is refused")
	}
	// The burst: budgetBurst seconds of the rate, spent at once.
	b.Charge("project/a", time.Duration(b.burst*float64(time.Second))-time.Millisecond)
	if _, ok := b.Admit("project/a"); !ok {
		t.Fatal("a tenant within its burst is refused")
	}
	b.Charge("project/a", time.Duration(rate*float64(time.Second))) // one second of the rate into debt
	wait, ok := b.Admit("project/a")
	if ok {
		t.Fatal("a tenant in debt is admitted")
	}
	if wait < 900*time.Millisecond || wait > time.Second {
		t.Fatalf("Retry-After for one second of debt: %v", wait)
	}
	// Another tenant is not held back by the first's debt.
	if _, ok := b.Admit("project/b"); !ok {
		t.Fatal("another tenant is refused")
	}
	c.t = c.t.Add(wait + time.Millisecond)
	if _, ok := b.Admit("project/a"); !ok {
		t.Fatal("a tenant that has earned its debt back is refused")
	}
}

func TestBudgetDebtIsBounded(t *testing.T) {
	b, c := budgetAt(t, 0.25)
	b.Charge("project/a", time.Hour) // a watch's writes, charged after the fact
	wait, ok := b.Admit("project/a")
	if ok || wait > budgetMaxDebt {
		t.Fatalf("after an hour's charge: admitted %v, Retry-After %v (at most %v)", ok, wait, budgetMaxDebt)
	}
	c.t = c.t.Add(budgetMaxDebt + time.Millisecond)
	if _, ok := b.Admit("project/a"); !ok {
		t.Fatal("refused after the longest debt was earned back")
	}
}

func TestBudgetHoldsNothingForIdleTenants(t *testing.T) {
	b, c := budgetAt(t, 0.25)
	for i := range 5000 {
		b.Charge(string(rune('a'+i%26))+string(rune(i)), time.Millisecond)
	}
	if b.buckets.len() == 0 {
		t.Fatal("charged tenants are not held")
	}
	// Once every balance is full again, the next charge after a sweep's
	// interval drops them.
	c.t = c.t.Add(max(budgetBurst, budgetSweep))
	b.Charge("busy", time.Nanosecond)
	if n := b.buckets.len(); n > 1 {
		t.Fatalf("%d tenants held once their balances are full, want only the busy one", n)
	}
}

func TestNoBudget(t *testing.T) {
	var b *Budget
	if NewBudget(0) != nil || NewBudget(-1) != nil {
		t.Fatal("a share of 0 or less makes a budget")
	}
	b.Charge("project/a", time.Hour)
	if _, ok := b.Admit("project/a"); !ok || b.Rate() != 0 {
		t.Fatal("no budget refuses")
	}
}
