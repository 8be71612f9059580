package garbagecollector

import (
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
)

// node is what the collector keeps of one object: only objects that have
// owners, or that wait for their dependents (finalizers foregroundDeletion
// or orphan) are kept. Objects with neither — most of a project's — cost
// nothing here.
type node struct {
	key      allprojects.Key
	resource schema.GroupVersionResource
	uid      types.UID
	owners   []metav1.OwnerReference
	// deleting with the foregroundDeletion or orphan finalizer.
	foreground, orphan bool
}

// ownerKey names an owner as its dependents reference it: UIDs are unique,
// and qualifying them with the project keeps one project's references from
// ever reaching another project's objects.
type ownerKey struct {
	projectID string
	uid       types.UID
}

// graph indexes dependents by owner. It is the collector's only state, keyed
// by tenant: nothing is allocated for a project that has no owner references.
type graph struct {
	mu sync.Mutex
	// nodes by resource, then by key.
	nodes map[schema.GroupVersionResource]map[allprojects.Key]*node
	// dependents of every owner UID referenced.
	dependents map[ownerKey]map[*node]struct{}
	// owners are the owner keys referenced, by the group of the reference
	// (with how many references name each), so that a list of one
	// resource checks only the references to its group.
	owners map[string]map[ownerKey]int
}

func newGraph() *graph {
	return &graph{nodes: map[schema.GroupVersionResource]map[allprojects.Key]*node{}, dependents: map[ownerKey]map[*node]struct{}{},
		owners: map[string]map[ownerKey]int{}}
}

// keep reports whether an object belongs in the graph.
func keep(m metav1.Object) bool {
	if len(m.GetOwnerReferences()) > 0 {
		return true
	}
	return m.GetDeletionTimestamp() != nil && (slices.Contains(m.GetFinalizers(), metav1.FinalizerDeleteDependents) || slices.Contains(m.GetFinalizers(), metav1.FinalizerOrphanDependents))
}

// put records or updates an object, or drops it when it no longer belongs.
func (g *graph) put(n *node) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removeLocked(n.resource, n.key)
	byKey := g.nodes[n.resource]
	if byKey == nil {
		byKey = map[allprojects.Key]*node{}
		g.nodes[n.resource] = byKey
	}
	byKey[n.key] = n
	for _, ref := range n.owners {
		k := ownerKey{n.key.ID, ref.UID}
		if g.dependents[k] == nil {
			g.dependents[k] = map[*node]struct{}{}
		}
		g.dependents[k][n] = struct{}{}
		group := refGroup(ref)
		if g.owners[group] == nil {
			g.owners[group] = map[ownerKey]int{}
		}
		g.owners[group][k]++
	}
}

func (g *graph) remove(resource schema.GroupVersionResource, key allprojects.Key) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removeLocked(resource, key)
}

func (g *graph) removeLocked(resource schema.GroupVersionResource, key allprojects.Key) {
	old, ok := g.nodes[resource][key]
	if !ok {
		return
	}
	delete(g.nodes[resource], key)
	if len(g.nodes[resource]) == 0 {
		delete(g.nodes, resource)
	}
	for _, ref := range old.owners {
		k := ownerKey{key.ID, ref.UID}
		delete(g.dependents[k], old)
		if len(g.dependents[k]) == 0 {
			delete(g.dependents, k)
		}
		group := refGroup(ref)
		if g.owners[group][k]--; g.owners[group][k] <= 0 {
			delete(g.owners[group], k)
			if len(g.owners[group]) == 0 {
				delete(g.owners, group)
			}
		}
	}
}

// replace makes the graph's nodes of one resource of one view exactly nodes.
func (g *graph) replace(resource schema.GroupVersionResource, platform bool, nodes []*node) {
	g.mu.Lock()
	for key := range g.nodes[resource] {
		if (key.Project == "") == platform {
			g.removeLocked(resource, key)
		}
	}
	g.mu.Unlock()
	for _, n := range nodes {
		g.put(n)
	}
}

// dependentsOf returns the dependents referencing an owner of a project.
func (g *graph) dependentsOf(projectID string, uid types.UID) []*node {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*node
	for n := range g.dependents[ownerKey{projectID, uid}] {
		out = append(out, n)
	}
	return out
}

// missingOwners returns the dependents of one view (the platform's, or
// every project's) that reference an owner of group and one of kinds whose
// key is not in present: those whose owner of a resource just listed is gone.
func (g *graph) missingOwners(group string, kinds []string, platform bool, present map[ownerKey]struct{}) []*node {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*node
	for k := range g.owners[group] {
		if _, ok := present[k]; ok || (k.projectID == "") != platform {
			continue
		}
		for n := range g.dependents[k] {
			if slices.ContainsFunc(n.owners, func(r metav1.OwnerReference) bool {
				return r.UID == k.uid && refGroup(r) == group && slices.Contains(kinds, r.Kind)
			}) {
				out = append(out, n)
			}
		}
	}
	return out
}

// refGroup is the API group an owner reference names.
func refGroup(r metav1.OwnerReference) string {
	group, _, found := strings.Cut(r.APIVersion, "/")
	if !found {
		return "" // the core group: "v1"
	}
	return group
}

// size is the number of objects kept, for tests and metrics.
func (g *graph) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, byKey := range g.nodes {
		n += len(byKey)
	}
	return n
}
