package projectcrds

import (
	"context"
	"testing"
)

func TestWatchesEndWhenTheirCRDLeavesTheClass(t *testing.T) {
	var e watchEnds
	ctx := context.Background()
	a1, doneA1 := e.add(ctx, "p/widgets.example.com", "A")
	a2, doneA2 := e.add(ctx, "p/widgets.example.com", "A")
	other, doneOther := e.add(ctx, "q/widgets.example.com", "A")
	defer doneA2()
	defer doneOther()
	e.changed("p/widgets.example.com", "A") // a status write: the same class
	if a1.Err() != nil || a2.Err() != nil {
		t.Fatal("a change that keeps the class ended the watches")
	}
	b, doneB := e.add(ctx, "p/widgets.example.com", "B")
	defer doneB()
	e.changed("p/widgets.example.com", "B")
	if a1.Err() == nil || a2.Err() == nil {
		t.Error("the watches served by the class the CRD left are still open")
	}
	if b.Err() != nil {
		t.Error("a watch served by the CRD's new class was ended")
	}
	if other.Err() != nil {
		t.Error("another project's watch of the same class was ended")
	}
	e.changed("p/widgets.example.com", "")
	if b.Err() == nil {
		t.Error("a watch of a deleted CRD is still open")
	}
	doneA1()
	doneA2()
	doneB()
	if n := e.open(); n != 1 {
		t.Errorf("%d watches registered after all but one ended, want 1", n)
	}
}
