package allprojects

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Controllers of one term asking for the same metadata share one informer;
// another view, another term, or the same term once it has ended get their own.
func TestMetadataInformersAreSharedWithinATerm(t *testing.T) {
	clients, err := NewClients(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	namespaces := corev1.SchemeGroupVersion.WithResource("namespaces")
	term, end := context.WithCancel(context.Background())
	other, endOther := context.WithCancel(context.Background())
	defer endOther()
	get := func(ctx context.Context, allProjects bool) any {
		inf, err := clients.MetadataInformer(ctx, namespaces, allProjects, nil)
		if err != nil {
			t.Fatal(err)
		}
		return inf
	}
	a := get(term, true)
	if get(term, true) != a {
		t.Fatal("the same term got two informers of every project's namespaces")
	}
	if get(term, false) == a || get(other, true) == a {
		t.Fatal("another view or another term shares the informer")
	}
	end()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		clients.sharedMu.Lock()
		defer clients.sharedMu.Unlock()
		for k := range clients.shared {
			if k.done == term.Done() {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal("an ended term's informers are still kept")
	}
	if get(term, true) == a {
		t.Fatal("an ended term's informer was handed out again")
	}
}

// A slimmed object keeps only its key, resourceVersion and deletion, and its
// key still names its project: the key is in the qualified namespace, not in
// the annotations Slim drops.
func TestSlimKeepsTheKey(t *testing.T) {
	now := metav1.Now()
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: "", UID: "u", ResourceVersion: "7",
		DeletionTimestamp: &now, Labels: map[string]string{"a": "b"}, Finalizers: []string{"kubernetes"},
		Annotations: map[string]string{tenancy.AnnotationKey: "web", tenancy.IDAnnotationKey: tenancy.ProjectID("1"), "other": "x"}}}
	q, _ := Qualify(obj)
	Slim(&q.(*metav1.PartialObjectMetadata).ObjectMeta)
	want := metav1.ObjectMeta{Name: "team", Namespace: tenancy.ProjectID("1") + "/web", ResourceVersion: "7", DeletionTimestamp: &now}
	if got := q.(*metav1.PartialObjectMetadata).ObjectMeta; got.String() != want.String() {
		t.Fatalf("slimmed to %v, want %v", got, want)
	}
	k, ok := KeyOf(q, true)
	if !ok || k != (Key{Project: "web", ID: tenancy.ProjectID("1"), Name: "team"}) {
		t.Fatalf("KeyOf = %+v", k)
	}
}
