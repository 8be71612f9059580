package typedinformer

import (
	"context"
	"sync"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Storage is a resource's storage in the server's own process: a typed
// REST store. Without a watch cache its List and Watch hand out objects
// that nothing else holds (it decodes each for its caller); with one, the
// objects the cache keeps (NewFromSharedStorage).
type Storage interface {
	rest.Lister
	rest.Watcher
}

// NewFromStorage returns an informer of every object of storage, in every
// namespace, read in-process: no request through the handler chain, no
// encoding on the server and decoding in the informer, as over the
// loopback. Its objects are as New's. storage must be one whose objects
// are the caller's alone (one without a watch cache): the informer drops
// fields from each.
func NewFromStorage(storage Storage, example runtime.Object, resync time.Duration, indexers cache.Indexers, slim func(runtime.Object)) cache.SharedIndexInformer {
	lw := &storageListWatch{ListWatch: &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			return listStorage(ctx, storage, options)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			return watchStorage(ctx, storage, options)
		},
	}}
	return newInformer(lw, example, resync, indexers, slim)
}

// listStorage lists storage as a list over the loopback would: a storage
// that does not answer (a database gone) ends it, and it is tried again.
func listStorage(ctx context.Context, storage Storage, options metav1.ListOptions) (runtime.Object, error) {
	internal, err := internalOptions(options)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	return storage.List(ctx, internal)
}

// watchStorage watches storage.
func watchStorage(ctx context.Context, storage Storage, options metav1.ListOptions) (watch.Interface, error) {
	internal, err := internalOptions(options)
	if err != nil {
		return nil, err
	}
	return storage.Watch(ctx, internal)
}

// listTimeout bounds one list (a page), as the server's request timeout
// bounds one over the loopback.
const listTimeout = time.Minute

// storageListWatch lists (a page at a time) and then watches, as over the
// loopback: a watch that streams its initial events (watch-list) is not
// asked for, so that what the informer reads is one path, the storage's
// list, whatever its backend.
type storageListWatch struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells the reflector to list first.
func (storageListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func internalOptions(options metav1.ListOptions) (*metainternalversion.ListOptions, error) {
	out := &metainternalversion.ListOptions{}
	err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&options, out, nil)
	return out, err
}

// NewFromSharedStorage returns an informer of every object of the storage
// get returns, read in-process as NewFromStorage reads it, for storage whose
// objects others hold too (a watch cache hands out the objects it keeps):
// each object listed or watched is deep-copied before the informer keeps it
// and drops fields from it. A copy costs a fraction of what the same object
// costs over the loopback (encoded by the server, framed, and decoded
// again). While get returns nil (the storage is not built yet) it reads
// over client, as New does; get is asked at each list and watch.
func NewFromSharedStorage(get func() Storage, client restclient.Interface, resource string, example runtime.Object, resync time.Duration, indexers cache.Indexers, slim func(runtime.Object)) cache.SharedIndexInformer {
	remote := cache.NewListWatchFromClient(client, resource, metav1.NamespaceAll, fields.Everything())
	lw := &storageListWatch{ListWatch: &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			storage := get()
			if storage == nil {
				return remote.ListWithContext(ctx, options)
			}
			list, err := listStorage(ctx, storage, options)
			if err != nil {
				return nil, err
			}
			return copyList(list), nil
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			storage := get()
			if storage == nil {
				return remote.WatchWithContext(ctx, options)
			}
			w, err := watchStorage(ctx, storage, options)
			if err != nil {
				return nil, err
			}
			return newCopyingWatch(w), nil
		},
	}}
	return newInformer(lw, example, resync, indexers, slim)
}

// copyObject is a copy of obj the caller owns: a cacheable wrapper (the
// watch cache's, encoding an event once for every watcher) hands out a
// copy of what it wraps.
func copyObject(obj runtime.Object) runtime.Object {
	if c, ok := obj.(runtime.CacheableObject); ok {
		return c.GetObject()
	}
	return obj.DeepCopyObject()
}

// copyList is a deep copy of list, whose items share what they hold with
// the cache.
func copyList(list runtime.Object) runtime.Object { return list.DeepCopyObject() }

// copyingWatch hands on the events of a watch of shared storage, each
// object a copy the receiver owns. Stopped, it returns even while an event
// waits for a receiver that no longer reads.
type copyingWatch struct {
	w      watch.Interface
	result chan watch.Event
	done   chan struct{}
	stop   sync.Once
}

func newCopyingWatch(w watch.Interface) *copyingWatch {
	c := &copyingWatch{w: w, result: make(chan watch.Event), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *copyingWatch) run() {
	defer close(c.result)
	for e := range c.w.ResultChan() {
		if e.Object != nil {
			e.Object = copyObject(e.Object)
		}
		select {
		case c.result <- e:
		case <-c.done:
			return
		}
	}
}

// ResultChan implements watch.Interface.
func (c *copyingWatch) ResultChan() <-chan watch.Event { return c.result }

// Stop implements watch.Interface.
func (c *copyingWatch) Stop() {
	c.stop.Do(func() {
		close(c.done)
		c.w.Stop()
	})
}
