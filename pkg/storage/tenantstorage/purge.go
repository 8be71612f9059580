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
// of a resource in a project, or false when the server stores no such resource.
func (p *Prefixes) NamespaceKeyPrefix(resource schema.GroupResource, project, namespace string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	full, ok := p.byResource[resource]
	if !ok {
		return "", false
	}
	return full + "/" + tenancy.ProjectTenant(project).KeySegment() + "/" + namespace + "/", true
}

// CountInNamespace counts, directly in etcd and without reading values, a
// project's objects of one resource in one namespace.
func CountInNamespace(ctx context.Context, client *clientv3.Client, prefixes *Prefixes, resource schema.GroupResource, project, namespace string) (int64, error) {
	prefix, ok := prefixes.NamespaceKeyPrefix(resource, project, namespace)
	if !ok {
		return 0, fmt.Errorf("no storage for %s", resource)
	}
	resp, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("counting %s in %s/%s: %w", resource, project, namespace, err)
	}
	return resp.Count, nil
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
// holds exactly one project's objects. Each ends in "/", so no project's prefix is
// a prefix of another's.
func (p *Prefixes) TenantKeyPrefixes(project string) []string {
	resources := p.List()
	out := make([]string, 0, len(resources))
	for _, r := range resources {
		out = append(out, r+"/"+tenancy.ProjectTenant(project).KeySegment()+"/")
	}
	return out
}

// Purge deletes every key of a project across all resources, directly in etcd.
// It is what makes a project's name safe to reuse: the watch caches see the
// deletions through their etcd watches, like any other delete.
//
// Purge is idempotent and safe to re-run after a crash: a second run finds
// nothing left. The range deletes of all resources go in as few etcd
// transactions as the server's limit on operations per transaction allows
// (one for a server with the default limit and fewer than txnOps resources), so
// a purge costs one consensus round and one disk sync rather than one per
// resource. It reports how many keys it deleted. It refuses names that are not
// project names, so it can never touch the platform's keys.
func Purge(ctx context.Context, client *clientv3.Client, prefixes *Prefixes, project string) (int64, error) {
	if !tenancy.ValidProjectName(project) {
		return 0, fmt.Errorf("purge: %q is not a project name", project)
	}
	all := prefixes.TenantKeyPrefixes(project)
	for _, prefix := range all {
		if !strings.HasSuffix(prefix, "/"+project+"/") {
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
			return deleted, fmt.Errorf("purging project %s: %w", project, err)
		}
		for _, r := range resp.Responses {
			if d := r.GetResponseDeleteRange(); d != nil {
				deleted += d.Deleted
			}
		}
	}
	klog.FromContext(ctx).V(2).Info("Purged project keys", "project", project, "keys", deleted)
	return deleted, nil
}

// txnOps stays below etcd's default --max-txn-ops (128).
const txnOps = 100
