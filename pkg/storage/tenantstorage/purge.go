package tenantstorage

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Prefixes records the etcd key prefix of every resource the server stores, so a
// tenant's keys can be found across all of them. It grows with the number of
// resources (and CRDs), never with the number of tenants.
type Prefixes struct {
	mu         sync.Mutex
	set        map[string]struct{}
	byResource map[schema.GroupResource]string
}

// NewPrefixes returns an empty record.
func NewPrefixes() *Prefixes {
	return &Prefixes{set: map[string]struct{}{}, byResource: map[schema.GroupResource]string{}}
}

func (p *Prefixes) add(storagePrefix, resourcePrefix string, resource schema.GroupResource) {
	full := path.Join("/", storagePrefix, resourcePrefix)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set[full] = struct{}{}
	if !resource.Empty() {
		p.byResource[resource] = full
	}
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
func CountInNamespace(ctx context.Context, client *clientv3.Client, prefixes *Prefixes, resource schema.GroupResource, projectID, namespace string) (int64, error) {
	prefix, ok := prefixes.NamespaceKeyPrefix(resource, projectID, namespace)
	if !ok {
		return 0, fmt.Errorf("no storage for %s", resource)
	}
	resp, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("counting %s in %s/%s: %w", resource, projectID, namespace, err)
	}
	return resp.Count, nil
}

// ExistsInNamespace reports, directly in etcd and without reading the value,
// whether one object of a resource is stored in a namespace of the project
// with storage id projectID.
func ExistsInNamespace(ctx context.Context, client *clientv3.Client, prefixes *Prefixes, resource schema.GroupResource, projectID, namespace, name string) (bool, error) {
	prefix, ok := prefixes.NamespaceKeyPrefix(resource, projectID, namespace)
	if !ok {
		return false, fmt.Errorf("no storage for %s", resource)
	}
	resp, err := client.Get(ctx, prefix+name, clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("looking up %s %s/%s: %w", resource, namespace, name, err)
	}
	return resp.Count > 0, nil
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

// TenantKeyPrefixes returns, for every recorded resource, the etcd key prefix that
// holds exactly the objects of the project with storage id projectID. Each ends
// in "/", so no project's prefix is a prefix of another's.
func (p *Prefixes) TenantKeyPrefixes(projectID string) []string {
	resources := p.List()
	out := make([]string, 0, len(resources))
	for _, r := range resources {
		out = append(out, r+"/"+projectID+"/")
	}
	return out
}

// Purge deletes every key of the project with storage id projectID across all
// resources, directly in etcd: the watch caches see the deletions through
// their etcd watches, like any other delete. A later project of the same name
// has another storage id, so it never meets these keys even where a purge did
// not run; purging is what returns their space.
//
// Purge is idempotent and safe to re-run after a crash: a second run finds
// nothing left. more are further resource key prefixes (as List returns them)
// the server may not have built a storage for since it started — a project's
// own CRDs'. The range deletes of all resources go in as few etcd
// transactions as the server's limit on operations per transaction allows
// (one for a server with the default limit and fewer than txnOps resources), so
// a purge costs one consensus round and one disk sync rather than one per
// resource. It reports how many keys it deleted. It refuses ids that are not
// project storage ids, so it can never touch the platform's keys.
func Purge(ctx context.Context, client *clientv3.Client, prefixes *Prefixes, projectID string, more ...string) (int64, error) {
	if !tenancy.ValidProjectID(projectID) {
		return 0, fmt.Errorf("purge: %q is not a project storage id", projectID)
	}
	all := prefixes.TenantKeyPrefixes(projectID)
	for _, r := range more {
		if p := r + "/" + projectID + "/"; !slices.Contains(all, p) {
			all = append(all, p)
		}
	}
	for _, prefix := range all {
		if !strings.HasSuffix(prefix, "/"+projectID+"/") {
			return 0, fmt.Errorf("purge: refusing unexpected prefix %q", prefix)
		}
	}
	var deleted int64
	for batch := range slices.Chunk(all, txnOps) {
		ops := make([]clientv3.Op, 0, len(batch))
		for _, prefix := range batch {
			ops = append(ops, clientv3.OpDelete(prefix, clientv3.WithPrefix()))
		}
		resp, err := client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return deleted, fmt.Errorf("purging project %s: %w", projectID, err)
		}
		for _, r := range resp.Responses {
			if d := r.GetResponseDeleteRange(); d != nil {
				deleted += d.Deleted
			}
		}
	}
	klog.FromContext(ctx).V(2).Info("Purged project keys", "projectID", projectID, "keys", deleted)
	return deleted, nil
}

// txnOps stays below etcd's default --max-txn-ops (128).
const txnOps = 100
