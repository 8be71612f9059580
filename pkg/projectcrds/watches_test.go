package projectcrds

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"go.miloapis.com/milo/pkg/tenancy"
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

func TestCreatesCountUntilTheIndexSeesThem(t *testing.T) {
	now := time.Unix(1000, 0)
	c := creates{now: func() time.Time { return now }}
	if !c.reserve("p", "a.example.com", []string{"x.example.com"}, 3) || !c.reserve("p", "b.example.com", []string{"x.example.com"}, 3) {
		t.Fatal("creates under the bound refused")
	}
	if c.reserve("p", "c.example.com", []string{"x.example.com"}, 3) {
		t.Fatal("a third create counted beside one stored and two being created passed a bound of 3")
	}
	if !c.reserve("q", "c.example.com", nil, 3) {
		t.Fatal("another project's creates were counted")
	}
	if !c.reserve("p", "a.example.com", []string{"x.example.com"}, 3) {
		t.Fatal("the same name admitted again (a retry) counted twice")
	}
	// The index sees a: it is counted there, not twice.
	c.seen("p", "a.example.com")
	if c.reserve("p", "c.example.com", []string{"x.example.com", "a.example.com"}, 3) {
		t.Fatal("a stored create no longer counted")
	}
	// b was refused after admission and never stored: it frees its place at the TTL.
	now = now.Add(reservationTTL)
	if !c.reserve("p", "c.example.com", []string{"x.example.com", "a.example.com"}, 3) {
		t.Fatal("a create that never reached the index still counted after the TTL")
	}
}

// TestParallelCreatesKeepToTheBound: creates admitted at once, before the
// index sees any of them, are held to --max-project-crds.
func TestParallelCreatesKeepToTheBound(t *testing.T) {
	const bound, tries = 5, 40
	p := newPlugin(Rules{Enabled: true, MaxPerProject: bound}, nil)
	ctx := tenancy.WithTenant(context.Background(), tenancy.Tenant{Kind: tenancy.Project, Name: "p", ID: "p.1"})
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			crd := &apiextensions.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w%d.example.com", i)},
				Spec: apiextensions.CustomResourceDefinitionSpec{Group: "example.com"}}
			a := admission.NewAttributesRecord(crd, nil, schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
				"", crd.Name, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
				"", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "tenant"})
			if p.Validate(ctx, a, nil) == nil {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != bound {
		t.Errorf("%d of %d parallel creates admitted under a bound of %d", n, tries, bound)
	}
}
