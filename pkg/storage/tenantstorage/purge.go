package tenantstorage

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Prefixes records the etcd key prefix of every resource the server stores, so a
// tenant's keys can be found across all of them. It grows with the number of
// resources (and CRDs), never with the number of tenants.
type Prefixes struct {
	mu sync.Mutex
	// storagePrefix is the server's storage prefix (every resource's).
	storagePrefix string
	set           map[string]struct{}
	byResource    map[schema.GroupResource]string
}

// NewPrefixes returns an empty record.
func NewPrefixes() *Prefixes {
	return &Prefixes{set: map[string]struct{}{}, byResource: map[schema.GroupResource]string{}}
}

func (p *Prefixes) add(storagePrefix, resourcePrefix string, resource schema.GroupResource) {
	full := path.Join("/", storagePrefix, resourcePrefix)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.storagePrefix == "" {
		p.storagePrefix = storagePrefix
	}
	p.set[full] = struct{}{}
	if !resource.Empty() {
		p.byResource[resource] = full
	}
}

// CustomResourcePrefix is the key prefix of a custom resource's objects (of
// every tenant) under the server's storage prefix: the apiextensions server
// stores them under their group and plural.
func CustomResourcePrefix(storagePrefix, group, plural string) string {
	return path.Join("/", storagePrefix, group, plural)
}

// NamespaceKeyPrefix returns the etcd key prefix holding one namespace's objects
// of a resource in the project with storage id projectID, or false when the
// server stores no such resource.
func (p *Prefixes) NamespaceKeyPrefix(resource schema.GroupResource, projectID, namespace string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	full, ok := p.byResource[resource]
	if !ok || !tenancy.ValidProjectID(projectID) {
		return "", false
	}
	return full + "/" + projectID + "/" + namespace + "/", true
}

// CountInNamespace counts, directly in etcd and without reading values, the
// objects of one resource in one namespace of the project with storage id projectID.
func CountInNamespace(ctx context.Context, keys keyranges.Store, prefixes *Prefixes, resource schema.GroupResource, projectID, namespace string) (int64, error) {
	prefix, ok := prefixes.NamespaceKeyPrefix(resource, projectID, namespace)
	if !ok {
		return 0, fmt.Errorf("no storage for %s", resource)
	}
	n, err := keys.Count(ctx, prefix)
	if err != nil {
		return 0, fmt.Errorf("counting %s in %s/%s: %w", resource, projectID, namespace, err)
	}
	return n, nil
}

// ExistsInNamespace reports, directly in etcd and without reading the value,
// whether one object of a resource is stored in a namespace of the project
// with storage id projectID.
func ExistsInNamespace(ctx context.Context, keys keyranges.Store, prefixes *Prefixes, resource schema.GroupResource, projectID, namespace, name string) (bool, error) {
	prefix, ok := prefixes.NamespaceKeyPrefix(resource, projectID, namespace)
	if !ok {
		return false, fmt.Errorf("no storage for %s", resource)
	}
	found, err := keys.Exists(ctx, prefix+name)
	if err != nil {
		return false, fmt.Errorf("looking up %s %s/%s: %w", resource, namespace, name, err)
	}
	return found, nil
}

// StoredByResource counts, directly in storage and without reading values,
// the objects of the project with storage id projectID in each of resources
// (on etcd, one transaction per hundred resources). A resource absent from
// the answer has no storage in this server (not served, or a project's own
// kind whose storage is not built yet), so its count is unknown, not 0.
// revision is one the counts hold at: a key written after it may not be
// counted, which a purge on the condition that nothing was written after
// it (PurgeUnchanged) does not miss.
func StoredByResource(ctx context.Context, keys keyranges.Store, prefixes *Prefixes, projectID string, resources []schema.GroupResource) (counts map[schema.GroupResource]int64, revision int64, err error) {
	if !tenancy.ValidProjectID(projectID) {
		return nil, 0, fmt.Errorf("counting: %q is not a project storage id", projectID)
	}
	var known []schema.GroupResource
	var ranges []string
	prefixes.mu.Lock()
	for _, r := range resources {
		if full, ok := prefixes.byResource[r]; ok && !slices.Contains(known, r) {
			known = append(known, r)
			ranges = append(ranges, full+"/"+projectID+"/")
		}
	}
	prefixes.mu.Unlock()
	each, revision, err := keys.CountEach(ctx, ranges...)
	if err != nil {
		return nil, 0, fmt.Errorf("counting the objects of project %s: %w", projectID, err)
	}
	counts = make(map[schema.GroupResource]int64, len(known))
	for i, r := range known {
		counts[r] = each[i]
	}
	return counts, revision, nil
}

// List returns the recorded prefixes, sorted.
func (p *Prefixes) List() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.set))
	for k := range p.set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// StoredUsage counts, directly in storage, the objects of the project with
// storage id projectID across every metered resource (Events aside) and,
// when withBytes, the bytes of their values (which costs reading them, a
// page at a time). more are further resource key prefixes, as for Purge.
func StoredUsage(ctx context.Context, keys keyranges.Store, prefixes *Prefixes, projectID string, withBytes bool, more ...string) (objects, bytes int64, err error) {
	if !tenancy.ValidProjectID(projectID) {
		return 0, 0, fmt.Errorf("usage: %q is not a project storage id", projectID)
	}
	all := prefixes.projectRanges(projectID, prefixes.unmeteredPrefixes(), more)
	if withBytes {
		return keys.Measure(ctx, all...)
	}
	objects, err = keys.Count(ctx, all...)
	return objects, 0, err
}

// projectRanges returns the key ranges that hold exactly the objects of the
// project with storage id projectID: one per recorded resource prefix and
// per further prefix in more (resources the server may not have built a
// storage for), but those in skip. Each ends in "/", so no project's range
// is a prefix of another's.
func (p *Prefixes) projectRanges(projectID string, skip map[string]bool, more []string) []string {
	var out []string
	// more first: a project's own kinds' objects go before the CRDs that
	// name their prefixes, so a purge interrupted between transactions
	// can still find them when it runs again.
	for _, r := range append(append([]string(nil), more...), p.List()...) {
		if rng := r + "/" + projectID + "/"; !skip[r] && !slices.Contains(out, rng) {
			out = append(out, rng)
		}
	}
	return out
}

// unmeteredPrefixes returns the key prefixes of the resources not metered.
func (p *Prefixes) unmeteredPrefixes() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for r, full := range p.byResource {
		if unmetered[r] {
			out[full] = true
		}
	}
	return out
}

// Purge deletes every key of the project with storage id projectID across all
// resources, directly in storage: the watch caches see the deletions through
// their watches, like any other delete. A later project of the same name
// has another storage id, so it never meets these keys even where a purge did
// not run; purging is what returns their space.
//
// Purge is idempotent and safe to re-run after a crash: a second run finds
// nothing left. more are further resource key prefixes (as List returns them)
// the server may not have built a storage for since it started — a project's
// own CRDs'. On etcd the range deletes go in as few transactions as its limit
// on operations per transaction allows (one for fewer than 100 resources), so
// a purge costs one consensus round and one disk sync; on kine, one key at a
// time (keyranges). It reports how many keys it deleted. It refuses ids that
// are not project storage ids, so it can never touch the platform's keys.
// The project's lives key goes first (see RequireLiveProjects): once it is
// gone, no create of the project is stored.
func Purge(ctx context.Context, keys keyranges.Store, prefixes *Prefixes, projectID string, more ...string) (int64, error) {
	return PurgeUnchanged(ctx, keys, prefixes, projectID, 0, more...)
}

// ErrChanged says a purge found the project's keys written after the
// revision it was given: what was decided about them from reads at that
// revision may not hold any more.
var ErrChanged = errors.New("the project's objects changed since they were read")

// PurgeUnchanged is Purge on the condition, when since is not 0, that
// none of the project's keys was written after revision since (on etcd,
// checked by each transaction); ErrChanged when one was, having deleted
// the ranges of the transactions before it.
func PurgeUnchanged(ctx context.Context, keys keyranges.Store, prefixes *Prefixes, projectID string, since int64, more ...string) (int64, error) {
	if !tenancy.ValidProjectID(projectID) {
		return 0, fmt.Errorf("purge: %q is not a project storage id", projectID)
	}
	all := prefixes.projectRanges(projectID, nil, more)
	prefixes.mu.Lock()
	if prefixes.storagePrefix != "" {
		// The project's lives key first, in the first transaction: no
		// create of the project is stored after it (RequireLiveProjects).
		all = append([]string{livesRangeOf(prefixes.storagePrefix, projectID)}, all...)
	}
	prefixes.mu.Unlock()
	for _, prefix := range all {
		if !strings.HasSuffix(prefix, "/"+projectID+"/") {
			return 0, fmt.Errorf("purge: refusing unexpected prefix %q", prefix)
		}
	}
	var deleted int64
	var err error
	unchanged := true
	if since == 0 {
		// No condition to check: kine, which compares no ranges, takes it too.
		deleted, err = keys.DeletePrefixes(ctx, all...)
	} else {
		deleted, unchanged, err = keys.DeletePrefixesUnchanged(ctx, since, all...)
	}
	if err != nil {
		return deleted, fmt.Errorf("purging project %s: %w", projectID, err)
	}
	if !unchanged {
		return deleted, fmt.Errorf("purging project %s: %w", projectID, ErrChanged)
	}
	klog.FromContext(ctx).V(2).Info("Purged project keys", "projectID", projectID, "keys", deleted)
	return deleted, nil
}

// StoredObjectsByProject counts, directly in storage, the objects every
// project stores across the metered resources (Events aside), by storage id:
// one keys-only pass over each resource. The map it returns holds one entry
// per project that stores anything; callers keep what they need.
//
// ids are the storage ids of the projects known (in any order): they cut
// each resource's keys into narrow ranges of about idsPerRange projects
// each, read a page at a time. On etcd a page costs a visit of every key
// from its start to its range's end, so paging one range of a whole
// resource would cost the square of its keys; cut, the pass costs its
// keys. Keys of projects not in ids are counted all the same.
func StoredObjectsByProject(ctx context.Context, keys keyranges.Store, prefixes *Prefixes, ids []string) (map[string]int64, error) {
	skip := prefixes.unmeteredPrefixes()
	sorted := slices.Sorted(slices.Values(ids))
	counts := map[string]int64{}
	for _, r := range prefixes.List() {
		if skip[r] {
			continue
		}
		base := r + "/"
		count := func(key string) error {
			id, _, found := strings.Cut(strings.TrimPrefix(key, base), "/")
			if found && tenancy.ValidProjectID(id) {
				counts[id]++
			}
			return nil
		}
		start := base
		for i := idsPerRange; i < len(sorted); i += idsPerRange {
			end := base + sorted[i] + "/"
			if end <= start {
				continue
			}
			if err := keys.KeysBetween(ctx, start, end, count); err != nil {
				return nil, err
			}
			start = end
		}
		// The end of the range of keys under base ('0' follows '/').
		if err := keys.KeysBetween(ctx, start, r+"0", count); err != nil {
			return nil, err
		}
	}
	return counts, nil
}

// idsPerRange is how many projects' keys StoredObjectsByProject reads in one
// range: a few pages of the resources with an object or a few per project.
const idsPerRange = 200
