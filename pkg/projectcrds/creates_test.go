package projectcrds

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"go.miloapis.com/milo/pkg/tenancy"
)

func TestCreatesCountUntilTheIndexSeesThem(t *testing.T) {
	now := time.Unix(1000, 0)
	c := creates{now: func() time.Time { return now }}
	stored := []string{"x.example.com"}
	have := func() []string { return stored }
	if !c.reserve("p", "a.example.com", have, 3, true) || !c.reserve("p", "b.example.com", have, 3, true) {
		t.Fatal("creates under the bound refused")
	}
	if c.reserve("p", "c.example.com", have, 3, true) {
		t.Fatal("a third create counted beside one stored and two being created passed a bound of 3")
	}
	if c.reserve("p", "c.example.com", have, 3, false) {
		t.Fatal("a dry run past the bound admitted")
	}
	if !c.reserve("q", "c.example.com", func() []string { return nil }, 3, true) {
		t.Fatal("another project's creates were counted")
	}
	if !c.reserve("p", "a.example.com", have, 3, true) {
		t.Fatal("the same name admitted again (a retry) counted twice")
	}
	if !c.reserve("p", "x.example.com", have, 3, true) {
		t.Fatal("a create of a name the project has (storage answers 409) refused by the bound")
	}
	// The index takes a in: it is counted there, not twice, whether or
	// not its reservation was dropped yet.
	stored = append(stored, "a.example.com")
	if c.reserve("p", "c.example.com", have, 3, true) {
		t.Fatal("a stored create no longer counted")
	}
	c.seen("p", "a.example.com")
	if c.reserve("p", "c.example.com", have, 3, true) {
		t.Fatal("a stored create no longer counted once seen")
	}
	// b was refused after admission and never stored: it frees its place at the TTL.
	now = now.Add(reservationTTL)
	if !c.reserve("p", "c.example.com", have, 3, true) {
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

// TestRefusedCreatesHoldNoPlace: a create the plugin refuses for another
// reason, and a dry run, do not count against the bound afterwards.
func TestRefusedCreatesHoldNoPlace(t *testing.T) {
	p := newPlugin(Rules{Enabled: true, MaxPerProject: 1, ReservedGroups: []string{"platform.example.org"}}, nil)
	ctx := tenancy.WithTenant(context.Background(), tenancy.Tenant{Kind: tenancy.Project, Name: "p", ID: "p.1"})
	create := func(name, group string, dryRun bool) error {
		crd := &apiextensions.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name + "." + group},
			Spec: apiextensions.CustomResourceDefinitionSpec{Group: group}}
		a := admission.NewAttributesRecord(crd, nil, schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
			"", crd.Name, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
			"", admission.Create, &metav1.CreateOptions{}, dryRun, &user.DefaultInfo{Name: "tenant"})
		return p.Validate(ctx, a, nil)
	}
	if err := create("gears", "sub.platform.example.org", false); !apierrors.IsInvalid(err) {
		t.Fatalf("a CRD in a group the operator reserves: %v, want 422", err)
	}
	if err := create("gears", "example.com", true); err != nil {
		t.Fatalf("a dry run under the bound: %v", err)
	}
	if err := create("gears", "example.com", false); err != nil {
		t.Fatalf("the first create after a refused one and a dry run: %v, want admitted", err)
	}
	if err := create("cogs", "example.com", true); !apierrors.IsForbidden(err) {
		t.Fatalf("a dry run past the bound: %v, want 403", err)
	}
	// A CRD defined before its group was reserved may still be updated.
	crd := &apiextensions.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "old.platform.example.org"},
		Spec: apiextensions.CustomResourceDefinitionSpec{Group: "platform.example.org"}}
	a := admission.NewAttributesRecord(crd, crd, schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
		"", crd.Name, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		"", admission.Update, &metav1.UpdateOptions{}, false, &user.DefaultInfo{Name: "tenant"})
	if err := p.Validate(ctx, a, nil); err != nil {
		t.Errorf("an update of a CRD in a group reserved after it was defined: %v", err)
	}
}
