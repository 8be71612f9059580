package tenancy

import (
	"sync"
	"testing"
)

// TestWatchLimit: each tenant holds at most the limit; tenants do not share
// it (a project is counted by storage id, so one created again under the same
// name starts with none); a released watch frees its place once, however often
// released; a tenant with none open keeps no entry.
func TestWatchLimit(t *testing.T) {
	l := NewWatchLimit(3)
	old := Tenant{Kind: Project, Name: "web", ID: "p.1"}
	var releases []func()
	for i := range 3 {
		release, ok := l.Acquire(old)
		if !ok {
			t.Fatalf("watch %d refused", i+1)
		}
		releases = append(releases, release)
	}
	if _, ok := l.Acquire(old); ok {
		t.Fatal("a fourth watch was allowed")
	}
	for _, other := range []Tenant{
		{Kind: Project, Name: "web", ID: "p.2"}, // the same name, created again
		{Kind: Project, Name: "api", ID: "p.3"},
		{Kind: Organization, Name: "web"},
	} {
		release, ok := l.Acquire(other)
		if !ok {
			t.Errorf("%+v refused while another tenant holds its most", other)
			continue
		}
		release()
	}
	releases[0]()
	releases[0]()
	if _, ok := l.Acquire(old); !ok {
		t.Fatal("a released place was not freed")
	}
	if _, ok := l.Acquire(old); ok {
		t.Fatal("releasing twice freed two places")
	}

	var wg sync.WaitGroup
	big := NewWatchLimit(50)
	for i := range 200 {
		wg.Go(func() {
			tenant := Tenant{Kind: Project, Name: "p", ID: []string{"a", "b"}[i%2]}
			if release, ok := big.Acquire(tenant); ok {
				release()
			}
		})
	}
	wg.Wait()
	if n := big.tenants(); n != 0 {
		t.Errorf("%d tenants keep an entry with no watch open", n)
	}

	if release, ok := (*WatchLimit)(nil).Acquire(old); !ok {
		t.Error("no limit refused a watch")
	} else {
		release()
	}
	if NewWatchLimit(0) != nil {
		t.Error("a limit of 0 limits")
	}
}
