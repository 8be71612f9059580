package typedinformer

import (
	"context"
	"io"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
)

// sharedStorage hands out the objects it keeps, as a watch cache does.
type sharedStorage struct {
	rest.TableConvertor
	kept    []quotav1alpha1.ResourceGrant
	events  *watch.FakeWatcher
	watched chan struct{}
}

func (s *sharedStorage) NewList() runtime.Object { return &quotav1alpha1.ResourceGrantList{} }

func (s *sharedStorage) List(context.Context, *metainternalversion.ListOptions) (runtime.Object, error) {
	// A new list whose items share their maps and slices with the kept
	// objects: what a watch cache's list holds.
	return &quotav1alpha1.ResourceGrantList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: append([]quotav1alpha1.ResourceGrant(nil), s.kept...)}, nil
}

func (s *sharedStorage) Watch(context.Context, *metainternalversion.ListOptions) (watch.Interface, error) {
	close(s.watched)
	return s.events, nil
}

// cacheable wraps an object as the watch cache wraps the objects of the
// events it sends, to encode each once for every watcher.
type cacheable struct{ obj runtime.Object }

func (c cacheable) CacheEncode(_ runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	return encode(c.obj, w)
}
func (c cacheable) GetObject() runtime.Object        { return c.obj.DeepCopyObject() }
func (c cacheable) GetObjectKind() schema.ObjectKind { return c.obj.GetObjectKind() }
func (c cacheable) DeepCopyObject() runtime.Object   { return c }

func grant(name string) quotav1alpha1.ResourceGrant {
	return quotav1alpha1.ResourceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "org-a", Name: name, ResourceVersion: "5",
		Labels: map[string]string{"tier": "gold"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate}}}}
}

// The informer over shared storage keeps copies: what it drops (managed
// fields) and what a reader of it might change are gone from its copies
// only, never from the objects the storage keeps for everyone else.
func TestSharedStorageObjectsAreCopied(t *testing.T) {
	listed, watched, wrapped := grant("listed"), grant("watched"), grant("wrapped")
	s := &sharedStorage{kept: []quotav1alpha1.ResourceGrant{listed}, events: watch.NewFake(), watched: make(chan struct{})}
	inf := NewFromSharedStorage(func() Storage { return s }, nil, "resourcegrants", &quotav1alpha1.ResourceGrant{}, 0, cache.Indexers{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	<-s.watched
	s.events.Add(&watched)
	s.events.Add(cacheable{&wrapped})

	var got []*quotav1alpha1.ResourceGrant
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got = nil
		for _, name := range []string{"org-a/listed", "org-a/watched", "org-a/wrapped"} {
			obj, ok, _ := inf.GetStore().GetByKey(name)
			if !ok {
				return false, nil
			}
			got = append(got, obj.(*quotav1alpha1.ResourceGrant))
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the informer does not hold the listed, the watched and the wrapped object: %v", err)
	}
	for _, g := range got {
		if g.ManagedFields != nil {
			t.Errorf("%s keeps its managed fields in the informer", g.Name)
		}
		g.Labels["tier"] = "changed by a reader"
	}
	for _, kept := range []quotav1alpha1.ResourceGrant{s.kept[0], watched, wrapped} {
		if kept.ManagedFields == nil {
			t.Errorf("the storage's %s lost its managed fields to the informer", kept.Name)
		}
		if kept.Labels["tier"] != "gold" {
			t.Errorf("the storage's %s was changed through the informer's copy: labels %v", kept.Name, kept.Labels)
		}
	}
}
