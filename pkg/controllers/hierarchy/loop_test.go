package hierarchy

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/hierarchy"
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

// TestLoopDropsIdleObjectsWithoutATrace: an object with nothing to do
// (every Ready project, when the process starts) is not queued by the
// informer's events, and a queued key whose object became idle is neither
// synced nor traced; one with work is synced once, in a span.
func TestLoopDropsIdleObjectsWithoutATrace(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	previous := otel.GetTracerProvider()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(previous)
		_ = tp.Shutdown(context.Background())
	})

	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	var synced []string
	l := newLoop("projects", inf, func(_ context.Context, u *unstructured.Unstructured) error {
		synced = append(synced, u.GetName())
		return nil
	})
	defer l.queue.ShutDown()
	l.idle = func(obj any) bool { return hierarchy.Object(obj).GetLabels()["ready"] == "true" }
	for _, name := range []string{"ready-1", "new-1", "ready-2"} {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project",
			"metadata": map[string]any{"name": name}}}
		u.SetLabels(map[string]string{tenancy.OrganizationLabel: "org", "ready": fmt.Sprint(name != "new-1")})
		if err := inf.GetIndexer().Add(u); err != nil {
			t.Fatal(err)
		}
		l.enqueue(u)
	}
	for range 3 {
		l.next(context.Background())
	}
	// The informer's events queue only what has work.
	for _, name := range []string{"ready-1", "new-1", "ready-2"} {
		obj, _, _ := inf.GetStore().GetByKey(name)
		l.changed(obj)
	}
	if l.queue.Len() != 1 {
		t.Errorf("%d keys queued by the events, want 1 (new-1)", l.queue.Len())
	}
	l.next(context.Background())
	if fmt.Sprint(synced) != "[new-1 new-1]" {
		t.Errorf("synced %v, want new-1 once from each queueing", synced)
	}
	var traced []string
	for _, s := range spans.Ended() {
		for _, a := range s.Attributes() {
			if a.Key == "milo.object" {
				traced = append(traced, a.Value.AsString())
			}
		}
	}
	if fmt.Sprint(traced) != "[new-1 new-1]" {
		t.Errorf("traced %v, want new-1 once from each queueing", traced)
	}
	if l.queue.Len() != 0 {
		t.Errorf("%d keys still queued", l.queue.Len())
	}
}
