package watchcache

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
)

// recording is a storage that records the options of the lists it is asked
// for, and fails those of more than fail objects (0: none).
type recording struct {
	storage.Interface
	lists []storage.ListOptions
	fail  int64
}

// A list it answers holds one ConfigMap per call; one it fails holds the
// ConfigMap it put in before failing.
func (r *recording) GetList(_ context.Context, _ string, opts storage.ListOptions, listObj runtime.Object) error {
	r.lists = append(r.lists, opts)
	if listObj != nil {
		list := listObj.(*corev1.ConfigMapList)
		list.Items = append(list.Items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("page-%d", len(r.lists))}})
	}
	if r.fail > 0 && opts.Predicate.Limit > r.fail {
		return errors.New("grpc: received message larger than max")
	}
	return nil
}

func TestFillingAsksForItsPageSize(t *testing.T) {
	limited := func(limit int64, recursive bool) storage.ListOptions {
		p := storage.Everything
		p.Limit = limit
		return storage.ListOptions{Predicate: p, Recursive: recursive}
	}
	for _, tc := range []struct {
		name      string
		opts      storage.ListOptions
		wantLimit int64
	}{
		{"the reflector's page", limited(10000, true), 50000},
		{"a page larger than the fill's", limited(80000, true), 50000},
		{"a page of the fill's size", limited(50000, true), 50000},
		{"a list without pages stays whole", limited(0, true), 0},
		// A single key's read (the current resource version) is not a fill.
		{"a single key", limited(1, false), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recording{}
			f := filling{Interface: r, pageSize: 50000}
			if err := f.GetList(context.Background(), "/configmaps", tc.opts, nil); err != nil {
				t.Fatal(err)
			}
			if len(r.lists) != 1 {
				t.Fatalf("storage was asked for %d lists, want 1", len(r.lists))
			}
			if got := r.lists[0].Predicate.Limit; got != tc.wantLimit {
				t.Errorf("storage was asked for a page of %d, want %d", got, tc.wantLimit)
			}
			if r.lists[0].Recursive != tc.opts.Recursive || r.lists[0].Predicate.Continue != tc.opts.Predicate.Continue {
				t.Errorf("the list's other options changed: %+v", r.lists[0])
			}
		})
	}
}

// A larger page that storage cannot answer is asked again at the
// cacher's own size.
func TestFillingFallsBackToTheCachersPage(t *testing.T) {
	r := &recording{fail: 10000}
	f := filling{Interface: r, pageSize: 50000}
	p := storage.Everything
	p.Limit = 10000
	list := &corev1.ConfigMapList{}
	if err := f.GetList(context.Background(), "/configmaps", storage.ListOptions{Predicate: p, Recursive: true}, list); err != nil {
		t.Fatalf("the fill failed: %v", err)
	}
	if len(r.lists) != 2 || r.lists[0].Predicate.Limit != 50000 || r.lists[1].Predicate.Limit != 10000 {
		t.Fatalf("storage was asked for %+v, want a page of 50,000, then one of 10,000", r.lists)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "page-2" {
		t.Fatalf("the fill's page holds %v, want only what the second page answered", list.Items)
	}
	// A failure of the cacher's own page is the fill's.
	r = &recording{fail: 1}
	f = filling{Interface: r, pageSize: 50000}
	if err := f.GetList(context.Background(), "/configmaps", storage.ListOptions{Predicate: p, Recursive: true}, &corev1.ConfigMapList{}); err == nil {
		t.Fatal("a page storage cannot answer at any size did not fail the fill")
	}
}

func TestIsUpstreamCachedTellsTheCachedDecorator(t *testing.T) {
	if !IsUpstreamCached(registry.StorageWithCacher()) {
		t.Error("upstream's watch-cache decorator is not recognised")
	}
	if IsUpstreamCached(generic.UndecoratedStorage) {
		t.Error("storage without a watch cache is taken for a cached one: --watch-cache=false would be ignored")
	}
	if IsUpstreamCached(nil) {
		t.Error("no decorator is taken for upstream's")
	}
}
