package watchcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/cacher/metrics"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
)

// Revisions reads the keys storage holds and the revisions they were last
// written at, without their values (keyranges.Store does).
type Revisions interface {
	KeyRevisions(ctx context.Context, start, end string, revision, pageSize int64, f func(key string, written int64) error) error
}

// checkChunk is how many of the cache's objects a check compares with one
// read of storage's keys, bounded by the first and last of them. etcd
// visits every key of a read's range for each page it answers, and decodes
// every value it leaves out of its answer: narrow ranges keep the check's
// work in proportion to the keys and a read's memory to a few MB, where
// one range over the whole resource cost the square of its keys and a
// value of every key of a page at once.
const checkChunk = 5000

// checkTurn lets one check run at a time in the process. A check holds its
// resource's list from the cache and a read of storage: the checks of
// every cache, which start together a period after the server does, would
// otherwise hold them all at once.
var checkTurn = make(chan struct{}, 1)

// checking tells whether watch caches are checked against storage, as
// upstream's delegator decides for its own check.
func checking() bool {
	return utilfeature.DefaultFeatureGate.Enabled(features.DetectCacheInconsistency) || panicOnInconsistency
}

// panicOnInconsistency is upstream's switch for tests: a check that finds
// the cache inconsistent panics.
var panicOnInconsistency, _ = strconv.ParseBool(os.Getenv("KUBE_WATCHCACHE_CONSISTENCY_CHECKER"))

// checker compares a watch cache with storage, as upstream's consistency
// check does, from storage's keys and revisions rather than its objects.
//
// Upstream's check lists every object of the resource from storage and
// decodes it, to read its name and resource version: at 100,000 projects
// that is a million objects decoded every five minutes, tens of
// CPU-seconds and a GiB of garbage. An object's key names it, and the
// revision storage last wrote the key at is its resource version: storage
// answers both without values, and nothing is decoded.
type checker struct {
	resource schema.GroupResource
	cache    *cacher.Cacher
	// newList makes the resource's list; key gives a cached object's key.
	newList func() runtime.Object
	key     func(runtime.Object) (string, error)
	// keyPrefix is storage's key of the cache's keys' root: a cached
	// object's key k is keyPrefix + k without its leading "/"; prefix is
	// the range of the resource's keys in storage.
	keyPrefix, prefix string
	// resourcePrefix is the cache's key of the resource's root.
	resourcePrefix string
	revisions      Revisions
	// chunk is how many objects are compared with one read of storage
	// (0: checkChunk).
	chunk int
	// checked, if not nil, is told every check's outcome.
	checked func(schema.GroupResource, error)
}

func newChecker(resource schema.GroupResource, c *cacher.Cacher, storagePrefix, resourcePrefix string, newList func() runtime.Object,
	key func(runtime.Object) (string, error), revisions Revisions, chunk int, checked func(schema.GroupResource, error)) *checker {
	// As etcd3's store joins its prefix with a key.
	keyPrefix := path.Join("/", storagePrefix)
	if !strings.HasSuffix(keyPrefix, "/") {
		keyPrefix += "/"
	}
	prefix := keyPrefix + strings.TrimPrefix(resourcePrefix, "/")
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &checker{resource: resource, cache: c, newList: newList, key: key, keyPrefix: keyPrefix, prefix: prefix,
		resourcePrefix: resourcePrefix, revisions: revisions, chunk: chunk, checked: checked}
}

// run checks every period (jittered as upstream's) until stop closes,
// waiting a period first.
func (c *checker) run(stop <-chan struct{}, period time.Duration) {
	const jitter = 0.5
	select {
	case <-time.After(wait.Jitter(period, jitter)):
	case <-stop:
		return
	}
	wait.JitterUntilWithContext(wait.ContextForChannel(stop), func(ctx context.Context) {
		select {
		case checkTurn <- struct{}{}:
		case <-ctx.Done():
			return
		}
		start := time.Now()
		err := c.checkInTurn(ctx)
		c.record(err, time.Since(start))
	}, period, jitter, true)
}

// checkTimeout is the longest a check may hold the process's turn: a read
// of storage that hangs must not hold up every other cache's check for
// good. Upstream's period, which a check at 100,000 projects takes a few
// seconds of.
const checkTimeout = 5 * time.Minute

// checkInTurn checks, holding the process's turn (taken), and gives the
// turn back.
func (c *checker) checkInTurn(ctx context.Context) error {
	defer func() { <-checkTurn }()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	return c.check(ctx)
}

// errInconsistent marks a check that found the cache and storage apart.
type errInconsistent struct{ detail string }

func (e errInconsistent) Error() string { return "watch cache inconsistent with storage: " + e.detail }

// record counts and logs a check's outcome as upstream's check does, and
// lets the cache serve lists from its snapshots only while it is
// consistent.
func (c *checker) record(err error, took time.Duration) {
	var inconsistent errInconsistent
	switch {
	case err == nil:
		klog.V(3).InfoS("Cache consistency check passed", "group", c.resource.Group, "resource", c.resource.Resource, "took", took)
		metrics.StorageConsistencyCheckTotal.WithLabelValues(c.resource.Group, c.resource.Resource, "success").Inc()
		c.cache.MarkConsistent(true)
	case errors.As(err, &inconsistent):
		klog.ErrorS(err, "Cache consistency check failed", "group", c.resource.Group, "resource", c.resource.Resource, "took", took)
		metrics.StorageConsistencyCheckTotal.WithLabelValues(c.resource.Group, c.resource.Resource, "failure").Inc()
		if panicOnInconsistency {
			panic(fmt.Sprintf("Cache consistency check failed, group: %q, resource: %q: %v", c.resource.Group, c.resource.Resource, err))
		}
		c.cache.MarkConsistent(false)
	default:
		klog.ErrorS(err, "Cache consistency check error", "group", c.resource.Group, "resource", c.resource.Resource, "took", took)
		metrics.StorageConsistencyCheckTotal.WithLabelValues(c.resource.Group, c.resource.Resource, "error").Inc()
	}
	if c.checked != nil {
		c.checked(c.resource, err)
	}
}

// check compares the cache's objects, listed at its current revision, with
// the keys storage held at that revision: the same keys in the same order,
// each written at its object's resource version.
func (c *checker) check(ctx context.Context) error {
	if !c.cache.Ready() {
		return fmt.Errorf("cache is not ready")
	}
	list, err := c.listCache(ctx)
	if err != nil {
		return fmt.Errorf("listing the cache: %w", err)
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	revision, err := strconv.ParseInt(listMeta.GetResourceVersion(), 10, 64)
	if err != nil {
		return fmt.Errorf("the cache's list has resource version %q: %w", listMeta.GetResourceVersion(), err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	diff, err := c.compare(ctx, items, revision)
	if err != nil {
		return err
	}
	if diff != "" {
		return errInconsistent{detail: fmt.Sprintf("at revision %d, %s", revision, diff)}
	}
	return nil
}

// compare compares items, the cache's objects in key order, with the keys
// storage held at revision, chunk by chunk: each chunk's objects with the
// keys of the range from the key after the chunk before's last object to
// the key after its own last (to the end of the resource's keys for the
// last chunk). It describes the first difference; "" if none.
func (c *checker) compare(ctx context.Context, items []runtime.Object, revision int64) (string, error) {
	chunk := c.chunk
	if chunk <= 0 {
		chunk = checkChunk
	}
	from, end := c.prefix, clientv3.GetPrefixRangeEnd(c.prefix)
	for first := 0; ; first += chunk {
		last := min(first+chunk, len(items))
		to := end
		if last < len(items) {
			k, _, err := c.identify(items[last-1])
			if err != nil {
				return "", err
			}
			to = k + "\x00"
		}
		i := first
		var diff string
		var unidentified error
		err := c.revisions.KeyRevisions(ctx, from, to, revision, int64(chunk)+1, func(key string, written int64) error {
			if i >= last {
				diff = fmt.Sprintf("storage holds %s (written at %d) after the cache's last object", key, written)
				return errStop
			}
			cachedKey, cachedRevision, err := c.identify(items[i])
			if err != nil {
				unidentified = err
				return errStop
			}
			if cachedKey != key || cachedRevision != written {
				diff = fmt.Sprintf("object %d: the cache holds %s at %d, storage %s written at %d", i, cachedKey, cachedRevision, key, written)
				return errStop
			}
			i++
			return nil
		})
		switch {
		case unidentified != nil:
			return "", unidentified
		case errors.Is(err, errStop):
			return diff, nil
		case err != nil:
			return "", fmt.Errorf("reading storage's keys at revision %d: %w", revision, err)
		case i < last:
			cachedKey, _, err := c.identify(items[i])
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("object %d of %d: the cache holds %s, which storage does not", i, len(items), cachedKey), nil
		}
		if last == len(items) {
			return "", nil
		}
		from = to
	}
}

// listCache lists every object of the cache at a revision storage still
// holds. A cache whose resource nobody wrote for a while is at the
// revision of its last event, which storage may have compacted away since:
// the cache is listed by a consistent read, which first brings it to
// storage's current revision (upstream's ConsistentListFromCache, with
// etcd's progress notifications). Where those are not supported (the
// cache does not catch up in time), it is listed as it is, as upstream's
// check lists it.
func (c *checker) listCache(ctx context.Context) (runtime.Object, error) {
	list := c.newList()
	opts := storage.ListOptions{Recursive: true, Predicate: storage.Everything}
	err := c.cache.GetList(ctx, c.resourcePrefix, opts, list)
	if !storage.IsTooLargeResourceVersion(err) {
		return list, err
	}
	list = c.newList()
	opts.ResourceVersion, opts.ResourceVersionMatch = "0", metav1.ResourceVersionMatchNotOlderThan
	return list, c.cache.GetList(ctx, c.resourcePrefix, opts, list)
}

// errStop ends a read of storage's keys at the first difference.
var errStop = errors.New("stop")

// identify gives a cached object's key in storage and its resource version.
func (c *checker) identify(obj runtime.Object) (string, int64, error) {
	k, err := c.key(obj)
	if err != nil {
		return "", 0, err
	}
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return "", 0, err
	}
	rv, err := strconv.ParseInt(accessor.GetResourceVersion(), 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("cached %s has resource version %q: %w", k, accessor.GetResourceVersion(), err)
	}
	return c.keyPrefix + strings.TrimPrefix(k, "/"), rv, nil
}
