package manager

import (
	"fmt"
	"testing"
)

type tenantKey struct{ project, org, name string }

func (k tenantKey) TenantKeys() (string, string) { return k.project, k.org }

func TestFairQueueTakesTenantsInTurn(t *testing.T) {
	q := NewTenantQueue[tenantKey]("fairqueue-test")
	defer q.ShutDown()
	// One project queues a thousand keys, then two others one each, and
	// an organization's and the platform's keys follow.
	for i := range 1000 {
		q.Add(tenantKey{project: "busy", name: fmt.Sprint(i)})
	}
	q.Add(tenantKey{project: "quiet", name: "only"})
	q.Add(tenantKey{project: "other", name: "only"})
	q.Add(tenantKey{org: "acme", name: "only"})
	q.Add(tenantKey{name: "platform"})
	// A key added again while it waits keeps its place, and its tenant's.
	q.Add(tenantKey{project: "busy", name: "0"})
	q.Add(tenantKey{project: "quiet", name: "only"})

	var got []tenantKey
	for range 7 {
		k, _ := q.Get()
		got = append(got, k)
		q.Done(k)
	}
	want := []tenantKey{{project: "busy", name: "0"}, {project: "quiet", name: "only"}, {project: "other", name: "only"},
		{org: "acme", name: "only"}, {name: "platform"}, {project: "busy", name: "1"}, {project: "busy", name: "2"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	// A project's own keys keep their order; a key added again while it
	// is being processed comes back behind its project's others.
	k, _ := q.Get()
	if k.name != "3" {
		t.Fatalf("busy's next key is %q, want 3", k.name)
	}
	q.Add(k)
	q.Done(k)
	if q.Len() != 997 {
		t.Fatalf("%d keys wait, want 997", q.Len())
	}
	for i := 4; i < 1000; i++ {
		k, _ := q.Get()
		if k.name != fmt.Sprint(i) {
			t.Fatalf("busy's key %d came as %q", i, k.name)
		}
		q.Done(k)
	}
	if k, _ := q.Get(); k.name != "3" {
		t.Fatalf("the re-added key came as %q, want 3", k.name)
	}
}

func TestFairQueueKeepsNothingForIdleTenants(t *testing.T) {
	q := newFairQueue(func(k tenantKey) string { return k.project })
	for i := range 100 {
		q.Push(tenantKey{project: fmt.Sprint("p", i%10), name: fmt.Sprint(i)})
	}
	if len(q.waiting) != 10 || q.Len() != 100 {
		t.Fatalf("%d tenants, %d keys waiting; want 10, 100", len(q.waiting), q.Len())
	}
	for range 100 {
		q.Pop()
	}
	if len(q.waiting) != 0 || q.round.len() != 0 || q.Len() != 0 {
		t.Fatalf("drained, the queue still holds %d tenants, %d in the round, %d keys", len(q.waiting), q.round.len(), q.Len())
	}
}

func TestQueuesOfUntenantedKeysAreFirstInFirstOut(t *testing.T) {
	q := NewQueue[string]("fifo-test")
	defer q.ShutDown()
	for _, k := range []string{"a", "b", "a2", "c"} {
		q.Add(k)
	}
	for _, want := range []string{"a", "b", "a2", "c"} {
		if k, _ := q.Get(); k != want {
			t.Fatalf("got %q, want %q", k, want)
		}
	}
}
