package authz

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"

	iamv1alpha1 "go.miloapis.com/milo/pkg/apis/iam/v1alpha1"
	"go.miloapis.com/milo/pkg/iam/evaluator"
)

func roleObject(namespace, name string, included []any, inherited []any) *unstructured.Unstructured {
	spec := map[string]any{}
	if included != nil {
		spec["includedPermissions"] = included
	}
	if inherited != nil {
		spec["inheritedRoles"] = inherited
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "Role",
		"metadata": map[string]any{"namespace": namespace, "name": name, "resourceVersion": "1"}, "spec": spec}}
}

func TestSameRole(t *testing.T) {
	base := roleObject("organization-acme", "r", []any{"core/configmaps.get"}, []any{map[string]any{"name": "viewer", "namespace": "milo-system"}})
	for _, c := range []struct {
		name   string
		change func(u *unstructured.Unstructured)
		same   bool
	}{
		{"a resync", func(*unstructured.Unstructured) {}, true},
		{"status, labels and resourceVersion", func(u *unstructured.Unstructured) {
			u.SetResourceVersion("2")
			u.SetLabels(map[string]string{"a": "b"})
			unstructured.SetNestedStringSlice(u.Object, []string{"core/configmaps.get"}, "status", "effectivePermissions") //nolint:errcheck
			unstructured.SetNestedField(u.Object, "Stable", "spec", "launchStage")                                         //nolint:errcheck
		}, true},
		{"a permission", func(u *unstructured.Unstructured) {
			unstructured.SetNestedStringSlice(u.Object, []string{"core/configmaps.list"}, "spec", "includedPermissions") //nolint:errcheck
		}, false},
		{"permissions gone", func(u *unstructured.Unstructured) {
			unstructured.RemoveNestedField(u.Object, "spec", "includedPermissions")
		}, false},
		{"an inherited role's namespace", func(u *unstructured.Unstructured) {
			unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "viewer"}}, "spec", "inheritedRoles") //nolint:errcheck
		}, false},
		{"inherited roles gone", func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "inheritedRoles") }, false},
	} {
		updated := base.DeepCopy()
		c.change(updated)
		if got := sameRole(base, updated); got != c.same {
			t.Errorf("%s: same %v, want %v", c.name, got, c.same)
		}
	}
}

// The informers' Role updates reach the evaluator, except those that change
// nothing it keeps.
func TestSyncSkipsRoleUpdatesThatChangeNothing(t *testing.T) {
	scheme := runtime.NewScheme()
	lists := map[schema.GroupVersionResource]string{foldersResource: "FolderList", projectsResource: "ProjectList",
		RolesResource: "RoleList", PolicyBindingsResource: "PolicyBindingList", GroupMembershipsResource: "GroupMembershipList", ProtectedResourcesResource: "ProtectedResourceList"}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, lists,
		roleObject("organization-acme", "a", []any{"core/configmaps.get"}, nil),
		roleObject("organization-acme", "marker", []any{"core/configmaps.get"}, nil))
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	e := evaluator.New()
	synced, err := Sync(e, factory)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("informers did not sync")
	}
	a := evaluator.RoleKey{Namespace: "organization-acme", Name: "a"}
	marker := evaluator.RoleKey{Namespace: "organization-acme", Name: "marker"}
	// Roles of one informer are handled in order: once the marker's change is
	// in, so is every update before it.
	n := 0
	await := func(what string) {
		t.Helper()
		n++
		perm := "core/configmaps.m" + string(rune('a'+n))
		roles := client.Resource(RolesResource).Namespace("organization-acme")
		if _, err := roles.Update(ctx, roleObject("organization-acme", "marker", []any{perm}, nil), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			perms, _ := e.EffectivePermissions(marker)
			return slices.Equal(perms, []string{perm}), nil
		}); err != nil {
			t.Fatalf("%s: the evaluator did not see the marker's change", what)
		}
	}
	await("start")
	// What the evaluator holds of a, set behind the informer's back: an update
	// the sync applies puts a's spec back, one it skips leaves this.
	e.SetRole(a, []string{"core/secrets.get"}, nil)
	roles := client.Resource(RolesResource).Namespace("organization-acme")
	statusOnly := roleObject("organization-acme", "a", []any{"core/configmaps.get"}, nil)
	unstructured.SetNestedStringSlice(statusOnly.Object, []string{"core/configmaps.get"}, "status", "effectivePermissions") //nolint:errcheck
	if _, err := roles.Update(ctx, statusOnly, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await("a status update")
	if perms, _ := e.EffectivePermissions(a); !slices.Equal(perms, []string{"core/secrets.get"}) {
		t.Fatalf("a status-only update was applied: %v", perms)
	}
	if _, err := roles.Update(ctx, roleObject("organization-acme", "a", []any{"core/configmaps.list"}, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await("a spec update")
	if perms, _ := e.EffectivePermissions(a); !slices.Equal(perms, []string{"core/configmaps.list"}) {
		t.Fatalf("a change of permissions was not applied: %v", perms)
	}
}

func TestBindingsGrantOnlyRolesTheirNamespaceMayUse(t *testing.T) {
	for _, c := range []struct {
		namespace string
		role      iamv1alpha1.RoleReference
		ok        bool
	}{
		{"organization-acme", iamv1alpha1.RoleReference{Name: "viewer", Namespace: "milo-system"}, true},
		{"organization-acme", iamv1alpha1.RoleReference{Name: "custom"}, true},
		{"organization-acme", iamv1alpha1.RoleReference{Name: "custom", Namespace: "organization-acme"}, true},
		{"organization-acme", iamv1alpha1.RoleReference{Name: "secret", Namespace: "organization-other"}, false},
		{"organization-acme", iamv1alpha1.RoleReference{Name: "stray", Namespace: "default"}, false},
		{"milo-system", iamv1alpha1.RoleReference{Name: "viewer"}, true},
		{"milo-system", iamv1alpha1.RoleReference{Name: "custom", Namespace: "organization-acme"}, false},
	} {
		b := &iamv1alpha1.PolicyBinding{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: "b"},
			Spec: iamv1alpha1.PolicyBindingSpec{RoleRef: c.role, Subjects: []iamv1alpha1.Subject{{Kind: "User", Name: "bob"}},
				ResourceSelector: iamv1alpha1.ResourceSelector{ResourceKind: &iamv1alpha1.ResourceKind{APIGroup: "", Kind: "ConfigMap"}}}}
		if _, ok := bindingOf(b); ok != c.ok {
			t.Errorf("a binding in %s granting %s/%s: counts %v, want %v", c.namespace, c.role.Namespace, c.role.Name, ok, c.ok)
		}
	}
}
