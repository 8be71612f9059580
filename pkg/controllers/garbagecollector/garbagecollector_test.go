package garbagecollector

import (
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	if g.size() != 0 || len(g.owners) != 0 || len(g.dependents) != 0 {
		t.Fatalf("a relist of the projects left %d nodes, %d owner groups, %d owners", g.size(), len(g.owners), len(g.dependents))
	}
	if deps := g.dependentsOf("p.b", "owner"); len(deps) != 0 {
		t.Fatalf("b's dependent survived the relist: %v", deps)
	}
}

// A list of a resource finds the dependents whose owner of that resource's
// group and kind it lacks, in its own view only: the owners deleted while
// nobody watched them (a resource a project has just defined, a watch that
// was down).
func TestMissingOwnersAreFoundByList(t *testing.T) {
	g := newGraph()
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	ref := func(apiVersion, kind, uid string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, UID: types.UID(uid)}
	}
	dep := func(project, name string, owner metav1.OwnerReference) *node {
		id := ""
		if project != "" {
			id = "id-" + project
		}
		n := &node{key: allprojects.Key{Project: project, ID: id, Namespace: "default", Name: name}, resource: cms, uid: types.UID("d-" + project + name), owners: []metav1.OwnerReference{owner}}
		g.put(n)
		return n
	}
	gone := dep("a", "of-gone", ref("example.net/v1", "Owner", "o1"))
	dep("a", "of-listed", ref("example.net/v1", "Owner", "o2"))
	dep("a", "of-other-kind", ref("example.net/v1", "Other", "o3"))
	dep("a", "of-other-group", ref("other.net/v1", "Owner", "o4"))
	dep("b", "of-listed-in-b", ref("example.net/v1", "Owner", "o5"))
	dep("", "on-the-platform", ref("example.net/v1", "Owner", "o6"))
	present := map[ownerKey]struct{}{{"id-a", "o2"}: {}, {"id-b", "o5"}: {}}
	missing := g.missingOwners("example.net", []string{"Owner"}, false, present)
	if len(missing) != 1 || missing[0] != gone {
		t.Fatalf("missing owners: %v, want only a's dependent of o1", missing)
	}
	// Another project's object of the same UID is not a's owner.
	present[ownerKey{"id-b", "o1"}] = struct{}{}
	if missing := g.missingOwners("example.net", []string{"Owner"}, false, present); len(missing) != 1 {
		t.Fatalf("b's object counted as a's owner: %v", missing)
	}
	if missing := g.missingOwners("", []string{"ConfigMap"}, false, present); len(missing) != 0 {
		t.Fatalf("dependents of core owners: %v", missing)
	}
	if missing := g.missingOwners("example.net", []string{"Owner"}, true, nil); len(missing) != 1 || missing[0].key.Project != "" {
		t.Fatalf("the platform's missing owners: %v", missing)
	}
}

// Only the storage's NotFound for the owner's name says the owner is gone;
// a path the server does not serve (a kind its view of a project's CRDs
// lacks for a moment) says nothing of the owner.
func TestOnlyTheOwnersNotFoundMeansGone(t *testing.T) {
	owners := schema.GroupResource{Group: "example.net", Resource: "owners"}
	for _, c := range []struct {
		name string
		err  error
		gone bool
	}{
		{"the storage's answer", apierrors.NewNotFound(owners, "w1"), true},
		{"another object's", apierrors.NewNotFound(owners, "w2"), false},
		{"another resource's of the name", apierrors.NewNotFound(schema.GroupResource{Group: "resourcemanager.miloapis.com", Resource: "projects"}, "w1"), false},
		{"the apiserver's for an unknown path", apierrors.NewNotFound(schema.GroupResource{}, ""), false},
		{"a 404 that is not a Status", apierrors.NewGenericServerResponse(404, "get", owners, "w1", "404 page not found", 0, true), false},
	} {
		if got := namesObject(c.err, owners, "w1"); got != c.gone {
			t.Errorf("%s: %v, want %v", c.name, got, c.gone)
		}
	}
}

// The collector always knows at least the last maxAbsent deletions, and
// never more than twice as many.
func TestDeletionsAreRememberedInTwoGenerations(t *testing.T) {
	tm := &term{absent: map[ownerKey]struct{}{}}
	key := func(i int) ownerKey { return ownerKey{"p", types.UID(fmt.Sprint(i))} }
	for i := range maxAbsent + 1 {
		tm.gone(key(i))
	}
	if !tm.seenGone(key(0)) || !tm.seenGone(key(maxAbsent)) {
		t.Fatal("a deletion among the last maxAbsent is forgotten")
	}
	if tm.seenGone(ownerKey{"q", "0"}) {
		t.Fatal("another project's object of the UID is taken as deleted")
	}
	for i := range maxAbsent {
		tm.gone(key(maxAbsent + 1 + i))
	}
	if tm.seenGone(key(0)) || len(tm.absent)+len(tm.absentOld) > 2*maxAbsent {
		t.Fatalf("remembering %d+%d deletions", len(tm.absent), len(tm.absentOld))
	}
}
