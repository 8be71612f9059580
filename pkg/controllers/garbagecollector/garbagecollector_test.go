package garbagecollector

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
)

func refs(uids ...string) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	for _, u := range uids {
		out = append(out, metav1.OwnerReference{UID: types.UID(u)})
	}
	return out
}

func TestDecide(t *testing.T) {
	bg, fg, orphan := metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan
	for _, c := range []struct {
		name       string
		states     []ownerState
		finalizers []string
		drop       []types.UID
		policy     *metav1.DeletionPropagation
	}{
		{"every owner present", []ownerState{solid, solid}, nil, nil, nil},
		{"the only owner gone", []ownerState{absent}, nil, nil, &bg},
		{"every owner gone", []ownerState{absent, absent}, nil, nil, &bg},
		{"one owner left: drop the other", []ownerState{solid, absent}, nil, []types.UID{"1"}, nil},
		{"one owner left, one deleting in the foreground", []ownerState{waiting, solid}, nil, []types.UID{"0"}, nil},
		{"owner deleting in the foreground", []ownerState{waiting}, nil, nil, &fg},
		{"owner gone, dependent orphans its own", []ownerState{absent}, []string{metav1.FinalizerOrphanDependents}, nil, &orphan},
		{"owner gone, dependent in the foreground", []ownerState{absent}, []string{metav1.FinalizerDeleteDependents}, nil, &fg},
	} {
		r := refs("0", "1")[:len(c.states)]
		drop, policy := Decide(r, c.states, c.finalizers)
		if !slices.Equal(drop, c.drop) || (policy == nil) != (c.policy == nil) || (policy != nil && *policy != *c.policy) {
			t.Errorf("%s: drop %v policy %v, want %v %v", c.name, drop, policy, c.drop, c.policy)
		}
	}
}

// The graph keeps only objects with owners, and a project's references never
// reach another project's owner of the same UID.
func TestGraphIsPerProject(t *testing.T) {
	g := newGraph()
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	a := &node{key: allprojects.Key{Project: "a", ID: "p.a", Namespace: "default", Name: "dep"}, resource: cms, uid: "d1", owners: refs("owner")}
	b := &node{key: allprojects.Key{Project: "b", ID: "p.b", Namespace: "default", Name: "dep"}, resource: cms, uid: "d2", owners: refs("owner")}
	g.put(a)
	g.put(b)
	if deps := g.dependentsOf("p.a", "owner"); len(deps) != 1 || deps[0] != a {
		t.Fatalf("dependents of a's owner: %v", deps)
	}
	g.put(&node{key: a.key, resource: cms, uid: "d1"}) // its references dropped
	if deps := g.dependentsOf("p.a", "owner"); len(deps) != 0 {
		t.Fatalf("a dependent without references is still indexed: %v", deps)
	}
	g.replace(cms, false, nil)
	if g.size() != 0 {
		t.Fatalf("a relist of the projects left %d nodes", g.size())
	}
	if deps := g.dependentsOf("p.b", "owner"); len(deps) != 0 {
		t.Fatalf("b's dependent survived the relist: %v", deps)
	}
}
