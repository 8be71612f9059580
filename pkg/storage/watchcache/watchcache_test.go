package watchcache

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
)

// recording is a storage that records the options of the lists it is asked for.
type recording struct {
	storage.Interface
	lists []storage.ListOptions
}

func (r *recording) GetList(_ context.Context, _ string, opts storage.ListOptions, _ runtime.Object) error {
	r.lists = append(r.lists, opts)
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
