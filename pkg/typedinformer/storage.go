package typedinformer

import (
	"context"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"
)

// Storage is a resource's storage in the server's own process: a typed
// REST store, whose List and Watch hand out objects that nothing else
// holds (storage without a watch cache decodes each for its caller).
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
			internal, err := internalOptions(options)
			if err != nil {
				return nil, err
			}
			// As a list over the loopback would be: a storage that does
			// not answer (a database gone) ends it, and it is tried again.
			ctx, cancel := context.WithTimeout(ctx, listTimeout)
			defer cancel()
			return storage.List(ctx, internal)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			internal, err := internalOptions(options)
			if err != nil {
				return nil, err
			}
			return storage.Watch(ctx, internal)
		},
	}}
	return newInformer(lw, example, resync, indexers, slim)
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
