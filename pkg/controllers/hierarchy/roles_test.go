package hierarchy

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// testRole is a Role in namespace inheriting roles ("name" or "namespace/name").
func testRole(namespace, name string, perms []string, inherits ...string) *unstructured.Unstructured {
	var inherited []any
	for _, in := range inherits {
		ref := map[string]any{"name": in}
		if ns, n, ok := strings.Cut(in, "/"); ok {
			ref = map[string]any{"namespace": ns, "name": n}
		}
		inherited = append(inherited, ref)
	}
	var included []any
	for _, p := range perms {
		included = append(included, p)
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "Role",
		"metadata": map[string]any{"namespace": namespace, "name": name},
		"spec":     map[string]any{"includedPermissions": included, "inheritedRoles": inherited}}}
}

func rolesInformer(t *testing.T, objs ...*unstructured.Unstructured) cache.SharedIndexInformer {
	t.Helper()
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	if err := addRoleIndex(inf); err != nil {
		t.Fatal(err)
	}
	if err := addRoleIndex(inf); err != nil {
		t.Fatalf("adding the index twice: %v", err)
	}
	for _, o := range objs {
		if err := inf.GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return inf
}

func drain(l *loop) []string {
	var keys []string
	for l.queue.Len() > 0 {
		k, _ := l.queue.Get()
		l.queue.Done(k)
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestRoleChangesQueueOnlyTheirInheritors(t *testing.T) {
	const acme = "organization-acme"
	base := testRole(acme, "base", []string{"core/configmaps.get"})
	inf := rolesInformer(t,
		base,
		testRole(acme, "mid", nil, "base"),
		testRole(acme, "top", nil, "organization-acme/mid"),
		testRole(acme, "unrelated", nil, "milo-system/viewer"),
		// Another organization naming acme's role: its inheritance does not count.
		testRole("organization-other", "probe", nil, "organization-acme/base"),
		testRole("milo-system", "viewer", nil),
	)
	l := newLoop("roles", inf, nil)
	defer l.queue.ShutDown()
	h := roleInheritors(l)

	changed := base.DeepCopy()
	unstructured.SetNestedStringSlice(changed.Object, []string{"core/configmaps.list"}, "spec", "includedPermissions") //nolint:errcheck
	statusOnly := base.DeepCopy()
	unstructured.SetNestedStringSlice(statusOnly.Object, []string{"core/configmaps.get"}, "status", "effectivePermissions") //nolint:errcheck
	for _, c := range []struct {
		name   string
		event  func()
		queued []string
	}{
		{"a spec change", func() { h.UpdateFunc(base, changed) }, []string{"organization-acme/mid", "organization-acme/top"}},
		{"a status write", func() { h.UpdateFunc(base, statusOnly) }, nil},
		{"a resync", func() { h.UpdateFunc(base, base.DeepCopy()) }, nil},
		{"the role appearing", func() { h.AddFunc(base) }, []string{"organization-acme/mid", "organization-acme/top"}},
		{"the role going", func() { h.DeleteFunc(cache.DeletedFinalStateUnknown{Key: "organization-acme/base", Obj: base}) },
			[]string{"organization-acme/mid", "organization-acme/top"}},
		{"the top changing", func() { h.AddFunc(testRole(acme, "top", nil, "mid")) }, nil},
		{"a platform role", func() { h.AddFunc(testRole("milo-system", "viewer", []string{"core/pods.get"})) }, []string{"organization-acme/unrelated"}},
	} {
		c.event()
		if got := drain(l); !slices.Equal(got, c.queued) {
			t.Errorf("%s: queued %v, want %v", c.name, got, c.queued)
		}
	}
}

func TestRoleStatusShowsNothingOfOtherOrganizations(t *testing.T) {
	const acme = "organization-acme"
	store := rolesInformer(t,
		testRole("organization-other", "secret", []string{"core/secrets.get"}),
		testRole("milo-system", "viewer", []string{"core/configmaps.get"}),
		testRole(acme, "reach", []string{"core/pods.get"}, "organization-other/secret", "milo-system/viewer"),
		testRole(acme, "probe", []string{"core/pods.get"}, "organization-other/nothing", "milo-system/viewer"),
		testRole("milo-system", "leak", nil, "organization-acme/reach"),
	).GetStore()
	reachPerms, reachProblem := flattenRole(store, acme, "reach")
	probePerms, probeProblem := flattenRole(store, acme, "probe")
	want := []string{"core/configmaps.get", "core/pods.get"}
	if !slices.Equal(reachPerms, want) || !slices.Equal(probePerms, want) {
		t.Errorf("effective permissions %v and %v, want %v", reachPerms, probePerms, want)
	}
	if reachProblem == "" || strings.ReplaceAll(reachProblem, "secret", "nothing") != strings.ReplaceAll(probeProblem, "probe", "reach") {
		t.Errorf("the Ready messages tell whether another organization's role exists: %q; %q", reachProblem, probeProblem)
	}
	if strings.Contains(reachProblem, "exist") {
		t.Errorf("the Ready message speaks of existence: %q", reachProblem)
	}
	if perms, problem := flattenRole(store, "milo-system", "leak"); len(perms) != 0 || problem == "" {
		t.Errorf("a platform role inheriting an organization's: %v, %q", perms, problem)
	}
}
