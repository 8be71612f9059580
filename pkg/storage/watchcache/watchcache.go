// Package watchcache builds a resource's watch cache: upstream's cacher in
// front of the resource's storage, as upstream's StorageWithCacher builds it,
// except that the cache fills from storage in larger pages.
//
// A watch cache fills (at start, and after its watch of storage breaks) by
// listing every object of its resource in pages of 10,000, a size upstream's
// cacher fixes. etcd answers each page by counting every key from the page's
// start to the end of the resource's range, which is how the client learns
// that more remain: N objects in pages of P cost etcd N²/2P key visits. For
// the 500,000 ConfigMaps of 100,000 projects that is 12.5 million visits
// in pages of 10,000, seconds of a restart, and 2.75 million in pages of
// 50,000 (SQL storage counts the same way). A page holds its objects twice
// for a moment (the response and the decoded objects), bounded by the cache
// the page is filling.
//
// Upstream's delegator checks every five minutes that its cache holds what
// storage holds (DetectCacheInconsistency) by listing and decoding every
// object of the resource. Given a reader of storage's keys and revisions,
// this package checks from those instead, decoding nothing (see checker);
// without one, upstream's check runs.
package watchcache

import (
	"context"
	"reflect"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// FillPageSize is the objects a watch cache asks storage for in each page
// of its fill.
const FillPageSize = 50000

// Options shape the watch caches Decorator builds.
type Options struct {
	// PageSize is the objects a cache asks storage for a page of its fill.
	PageSize int64
	// Revisions, if not nil, reads the keys and revisions of the storage
	// the caches fill from (the same etcd, not one elsewhere), and the
	// caches are checked against it instead of by upstream's check.
	Revisions Revisions
	// CheckPeriod is how often a cache is checked (0: upstream's period,
	// five minutes), jittered by up to half of it.
	CheckPeriod time.Duration
	// Checked, if not nil, is told the outcome of every check (nil: the
	// cache holds what storage holds).
	Checked func(schema.GroupResource, error)
	// CheckChunk is how many objects a check compares with one read of
	// storage (0: 5,000).
	CheckChunk int
	// Raw, if not nil, makes the storage a cache fills from and delegates
	// to; nil: generic.NewRawStorage.
	Raw func(config *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error)
}

// Decorator is a storage decorator that puts a watch cache in front of the
// resource's storage, as o shapes it.
func Decorator(o Options) generic.StorageDecorator {
	pageSize := o.PageSize
	newRaw := o.Raw
	if newRaw == nil {
		newRaw = generic.NewRawStorage
	}
	return func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(obj runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		raw, destroyRaw, err := newRaw(config, newFunc, newListFunc, resourcePrefix)
		if err != nil {
			return raw, destroyRaw, err
		}
		c, err := cacher.NewCacherFromConfig(cacher.Config{
			// The cacher's one list of storage is its reflector's fill; the
			// requests it does not serve from the cache go to raw, below.
			Storage:             filling{Interface: raw, pageSize: pageSize},
			Versioner:           storage.APIObjectVersioner{},
			GroupResource:       config.GroupResource,
			EventsHistoryWindow: config.EventsHistoryWindow,
			ResourcePrefix:      resourcePrefix,
			KeyFunc:             keyFunc,
			NewFunc:             newFunc,
			NewListFunc:         newListFunc,
			GetAttrsFunc:        getAttrs,
			IndexerFuncs:        triggers,
			Indexers:            indexers,
			Codec:               config.Codec,
		})
		if err != nil {
			destroyRaw()
			return nil, func() {}, err
		}
		delegator := cacher.NewCacheDelegator(c, raw)
		stopCheck := func() {}
		if o.Revisions != nil && checking() {
			// The delegator's Stop stops only its consistency check, which
			// this one replaces.
			delegator.Stop()
			check := newChecker(config.GroupResource, c, config.Prefix, resourcePrefix, newListFunc, keyFunc, o.Revisions, o.CheckChunk, o.Checked)
			period := o.CheckPeriod
			if period == 0 {
				period = cacher.ConsistencyCheckPeriod
			}
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				check.run(stop, period)
			}()
			stopCheck = func() {
				close(stop)
				<-done
			}
		}
		var once sync.Once
		return delegator, func() {
			once.Do(func() {
				stopCheck()
				delegator.Stop()
				c.Stop()
				destroyRaw()
			})
		}, nil
	}
}

// undecorated is the code of the decorator upstream's REST options give a
// resource without a watch cache. (Its cached decorator is a closure, whose
// code a caller may inline under a name of its own: not comparable.)
var undecorated = reflect.ValueOf(generic.UndecoratedStorage).Pointer()

// IsUpstreamCached tells whether d, a decorator upstream's REST options
// gave a resource, puts a watch cache in front of it: they give every
// resource either their watch-cache decorator or, where the watch cache is
// disabled (--watch-cache=false, or a size of 0 for the resource),
// generic.UndecoratedStorage. The resources whose decorator Decorator
// replaces, so that those flags keep their meaning.
func IsUpstreamCached(d generic.StorageDecorator) bool {
	return d != nil && reflect.ValueOf(d).Pointer() != undecorated
}

// filling is the storage a cacher fills from: each page its reflector asks
// for is made pageSize objects.
type filling struct {
	storage.Interface
	pageSize int64
}

// GetList asks for a page of pageSize. Only the reflector's fill lists
// through the cacher's storage; a page larger than asked for is still a
// page: the reflector's pager follows the continue token until none is
// left. A larger page that fails (one response is at most 2 GiB: 50,000
// objects of 43 KB) is asked again at the size the cacher asked for, so
// that a cache of large objects fills as upstream's would.
func (f filling) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if opts.Recursive && opts.Predicate.Limit > 0 && opts.Predicate.Limit != f.pageSize {
		larger := opts
		larger.Predicate.Limit = f.pageSize
		err := f.Interface.GetList(ctx, key, larger, listObj)
		if err == nil || ctx.Err() != nil {
			return err
		}
		klog.FromContext(ctx).Info("A watch cache's page failed; asking for the cacher's own page size", "key", key, "pageSize", f.pageSize, "err", err)
		// What the failed page put in the list before failing (an
		// object storage could not decode) is not the page asked again.
		if err := meta.SetList(listObj, nil); err != nil {
			return err
		}
	}
	return f.Interface.GetList(ctx, key, opts, listObj)
}
