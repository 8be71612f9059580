package hierarchy

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/tenancy"
)

// TestLoopServesOrganizationsInTurn: an organization that queues a thousand
// projects delays another organization's one project, and the other's own
// Organization object, by one key each, where a first-in-first-out queue
// served them after all thousand. A key whose object the informer no longer
// holds is served in a turn of its own.
func TestLoopServesOrganizationsInTurn(t *testing.T) {
	object := func(kind, name, org string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": kind,
			"metadata": map[string]any{"name": name}}}
		if org != "" {
			u.SetLabels(map[string]string{tenancy.OrganizationLabel: org})
		}
		return u
	}
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	add := func(u *unstructured.Unstructured) {
		if err := inf.GetIndexer().Add(u); err != nil {
			t.Fatal(err)
		}
	}
	l := newLoop("projects", inf, nil)
	defer l.queue.ShutDown()
	for i := range 1000 {
		p := object("Project", fmt.Sprintf("busy-%04d", i), "busy")
		add(p)
		l.enqueue(p)
	}
	quiet := object("Project", "quiet-web", "quiet")
	add(quiet)
	l.enqueue(quiet)
	quietOrg := object("Organization", "quiet", "")
	add(quietOrg)
	l.enqueue(quietOrg)
	l.enqueue(object("Project", "gone", "other")) // not in the informer

	var got []string
	for range 5 {
		k, _ := l.queue.Get()
		l.queue.Done(k)
		got = append(got, k)
	}
	want := []string{"busy-0000", "quiet-web", "gone", "busy-0001", "quiet"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	for i := 2; i < 1000; i++ {
		k, _ := l.queue.Get()
		l.queue.Done(k)
		if want := fmt.Sprintf("busy-%04d", i); k != want {
			t.Fatalf("busy's key %d came as %q, want %q", i, k, want)
		}
	}
}
