package telemetry

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSpaceSavingFindsTheHeavyHittersInFixedMemory(t *testing.T) {
	s := newSpaceSaving(20)
	// 10,000 projects with one request each, and three heavy ones in between:
	// space-saving finds every key above total/capacity (16,000/20 = 800).
	for i := range 10_000 {
		s.add(fmt.Sprintf("quiet-%d", i))
		if i%10 == 0 {
			s.add("heavy-a")
			s.add("heavy-a")
			s.add("heavy-a")
			s.add("heavy-b")
			s.add("heavy-b")
			s.add("heavy-c")
		}
	}
	if len(s.byKey) > 20 || len(s.heap) > 20 {
		t.Fatalf("%d keys, %d counters kept for a capacity of 20", len(s.byKey), len(s.heap))
	}
	top := s.top(3, 1)
	want := []string{"heavy-a", "heavy-b", "heavy-c"}
	for i, h := range top {
		if h.Project != want[i] {
			t.Fatalf("top 3: %+v, want %v", top, want)
		}
		// The guarantee: the true count is within [value, value+error].
		truth := map[string]float64{"heavy-a": 3000, "heavy-b": 2000, "heavy-c": 1000}[h.Project]
		if h.Value > truth || h.Value+h.Error < truth {
			t.Fatalf("%s: counted %.0f±%.0f, true %.0f", h.Project, h.Value, h.Error, truth)
		}
	}
}

func TestTopProjectsReportsTheLastCompleteWindow(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	top := NewTopProjects(2, time.Minute)
	top.now = func() time.Time { return now }
	top.started = now
	for range 120 {
		top.Count("busy")
	}
	top.Count("quiet")
	if got, _ := top.Requests(); len(got) != 0 {
		t.Fatalf("before a window has closed: %+v", got)
	}
	now = now.Add(61 * time.Second)
	got, until := top.Requests()
	if len(got) != 2 || got[0].Project != "busy" || got[0].Value != 2 || got[1].Project != "quiet" {
		t.Fatalf("after the window: %+v", got)
	}
	if !until.Equal(time.Unix(1_000_060, 0)) {
		t.Fatalf("window ended %v", until)
	}
	// A silent window reports nothing, not the window before it.
	now = now.Add(3 * time.Minute)
	if got, _ := top.Requests(); len(got) != 0 {
		t.Fatalf("after silence: %+v", got)
	}
}

func TestStoredKeepsTheTopN(t *testing.T) {
	top := NewTopProjects(2, time.Minute)
	top.SetStored(map[string]int64{"a": 5, "b": 50, "c": 500, "d": 1}, time.Unix(0, 0))
	got, _ := top.Stored()
	if len(got) != 2 || got[0].Project != "c" || got[1].Project != "b" {
		t.Fatalf("stored top 2: %+v", got)
	}
	var b strings.Builder
	WriteTable(&b, top.Report())
	if !strings.Contains(b.String(), "1     c ") && !strings.Contains(b.String(), "c") {
		t.Fatalf("table:\n%s", b.String())
	}
	if l := Largest(map[string]int64{"x": 1, "y": 3, "z": 2}, 2); len(l) != 2 || l["y"] != 3 || l["z"] != 2 {
		t.Fatalf("largest: %v", l)
	}
}
