package hierarchy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/component-base/metrics/testutil"
)

func hierarchyObject(name string, created time.Time, ready bool, deleted *time.Time) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project"}}
	u.SetName(name)
	u.SetCreationTimestamp(metav1.NewTime(created))
	if ready {
		u.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}
	}
	if deleted != nil {
		u.SetDeletionTimestamp(&metav1.Time{Time: *deleted})
	}
	return u
}

func TestPhasesCountAndAgeOnlyWhatIsNotReady(t *testing.T) {
	p := newPhases()
	long := time.Now().Add(-time.Hour)
	a := hierarchyObject("a", long, false, nil)
	p.change("Project", nil, a, false)
	p.change("Project", nil, hierarchyObject("b", time.Now(), false, nil), false)
	readyA := hierarchyObject("a", long, true, nil)
	p.change("Project", a, readyA, false)
	deleted := time.Now().Add(-2 * time.Hour)
	p.change("Project", readyA, hierarchyObject("a", long, true, &deleted), false)

	if n := len(p.since[phaseKey{"Project", phasePending}]); n != 1 {
		t.Fatalf("%d pending objects remembered, want 1 (b)", n)
	}
	registry := testutil.NewFakeKubeRegistry("1.36.0")
	registry.CustomMustRegister(p)
	got, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range got {
		for _, m := range mf.GetMetric() {
			labels := []string{mf.GetName()}
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			values[strings.Join(labels, " ")] = m.GetGauge().GetValue()
		}
	}
	for k, want := range map[string]float64{
		"milo_hierarchy_objects Project Pending":  1,
		"milo_hierarchy_objects Project Ready":    0,
		"milo_hierarchy_objects Project Deleting": 1,
	} {
		if values[k] != want {
			t.Errorf("%s = %v, want %v", k, values[k], want)
		}
	}
	if v := values["milo_hierarchy_oldest_seconds Project Deleting"]; v < 7000 || v > 7300 {
		t.Errorf("oldest deleting %v s, want about two hours", v)
	}
	if v := values["milo_hierarchy_oldest_seconds Project Pending"]; v > 60 {
		t.Errorf("oldest pending %v s: a has left Pending", v)
	}
	// A deletion forgets the object.
	p.change("Project", hierarchyObject("a", long, true, &deleted), nil, true)
	if n := len(p.since[phaseKey{"Project", phaseDeleting}]); n != 0 || p.counts[phaseKey{"Project", phaseDeleting}] != 0 {
		t.Fatalf("after the delete: %d remembered, count %d", n, p.counts[phaseKey{"Project", phaseDeleting}])
	}
}
