package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"go.miloapis.com/milo/pkg/tenancy"
)

var groupMembershipsGVR = schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "groupmemberships"}

// grantsOf is what one user could do in the matrix, each a yes or no.
type grantsOf struct {
	getDeep, getFlat, getOtherOrg, createDeep, getOtherDeep, updateDeep bool
}

// TestIAMGrantMatrix checks who gets what from bindings at every level —
// organization, nested folder, project, one object, a whole kind — for users,
// Group objects, authenticated (token) groups and inherited roles, then that a
// folder move and a revocation take access away, and that no IAM grant opens
// the all-projects view. Users sign in through the in-test OIDC issuer.
//
// The hierarchy: organization O with folder outer → folder inner → project
// deep, and project flat directly under O; organization P with project x.
// Every project has ConfigMaps settings and other in namespace default.
func TestIAMGrantMatrix(t *testing.T) {
	m, iss := shared, sharedIssuer
	ctx := context.Background()
	n := projectSeq.Add(1)
	o, p := fmt.Sprintf("matrix-%d", n), fmt.Sprintf("matrix-other-%d", n)
	outer, inner := o+"-outer", o+"-inner"
	deep, flat, x := o+"-deep", o+"-flat", p+"-x"
	var yaml strings.Builder
	for _, org := range []string{o, p} {
		fmt.Fprintf(&yaml, "apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Organization\nmetadata: {name: %s}\n---\n", org)
	}
	fmt.Fprintf(&yaml, `apiVersion: resourcemanager.miloapis.com/v1alpha1
kind: Folder
metadata: {name: %[1]s}
spec: {parentRef: {kind: Organization, name: %[3]s}}
---
apiVersion: resourcemanager.miloapis.com/v1alpha1
kind: Folder
metadata: {name: %[2]s}
spec: {parentRef: {kind: Folder, name: %[1]s}}
`, outer, inner, o)
	for _, pr := range []struct{ name, kind, parent string }{{deep, "Folder", inner}, {flat, "Organization", o}, {x, "Organization", p}} {
		fmt.Fprintf(&yaml, "---\napiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Project\nmetadata: {name: %s}\nspec: {ownerRef: {kind: %s, name: %s}}\n", pr.name, pr.kind, pr.parent)
	}
	eventuallyKubectl(t, m, m.Kubeconfig, yaml.String(), "apply", "-f", "-")
	for _, pr := range []string{deep, flat, x} {
		m.waitProjectReady(t, pr)
		for _, cm := range []string{"settings", "other"} {
			createConfigMap(t, m.projectKube(t, pr), "default", cm, nil, nil)
		}
	}

	orgNS := tenancy.OrganizationNamespace(o)
	ref := func(group, kind, name string) map[string]any {
		return map[string]any{"resourceRef": map[string]any{"apiGroup": group, "kind": kind, "name": name}}
	}
	user := func(name string) []any { return []any{map[string]any{"kind": "User", "name": name + "@example.com"}} }
	const rm = "resourcemanager.miloapis.com"
	bindings := map[string]struct {
		role     string
		subjects []any
		selector map[string]any
	}{
		"u-org":     {"viewer", user("u-org"), ref(rm, "Organization", o)},
		"u-folder":  {"viewer", user("u-folder"), ref(rm, "Folder", outer)},
		"u-project": {"viewer", user("u-project"), ref(rm, "Project", flat)},
		"u-object": {"editor", user("u-object"), map[string]any{"resourceRef": map[string]any{
			"apiGroup": "", "kind": "ConfigMap", "name": "settings", "namespace": "default", "project": deep}}},
		"u-kind":      {"viewer", user("u-kind"), map[string]any{"resourceKind": map[string]any{"apiGroup": "", "kind": "ConfigMap"}}},
		"u-group":     {"viewer", []any{map[string]any{"kind": "Group", "name": "readers", "namespace": orgNS}}, ref(rm, "Organization", o)},
		"u-authgroup": {"viewer", []any{map[string]any{"kind": "Group", "name": "matrix-token-group"}}, ref(rm, "Project", deep)},
		"u-inherit":   {"cm-creator", user("u-inherit"), ref(rm, "Project", deep)},
	}
	var objects strings.Builder
	fmt.Fprintf(&objects, `apiVersion: iam.miloapis.com/v1alpha1
kind: Role
metadata: {name: cm-creator, namespace: %[1]s}
spec:
  includedPermissions: [core/configmaps.create]
  inheritedRoles: [{name: viewer, namespace: milo-system}]
---
apiVersion: iam.miloapis.com/v1alpha1
kind: Group
metadata: {name: readers, namespace: %[1]s}
---
apiVersion: iam.miloapis.com/v1alpha1
kind: GroupMembership
metadata: {name: u-group-reads, namespace: %[1]s}
spec: {groupRef: {name: readers, namespace: %[1]s}, userRef: {name: u-group@example.com}}
`, orgNS)
	platform := m.dynamic(t)
	eventuallyKubectl(t, m, m.Kubeconfig, objects.String(), "apply", "-f", "-")
	for name, b := range bindings {
		role := map[string]any{"name": b.role, "namespace": "milo-system"}
		if b.role == "cm-creator" {
			role["namespace"] = orgNS
		}
		obj := objectOf("PolicyBinding", name, map[string]any{"roleRef": role, "subjects": b.subjects, "resourceSelector": b.selector})
		if _, err := platform.Resource(policyBindingsGVR).Namespace(orgNS).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("binding %s: %v", name, err)
		}
	}

	tokens := map[string]string{}
	for _, u := range []string{"u-org", "u-folder", "u-project", "u-object", "u-kind", "u-group", "u-authgroup", "u-inherit", "u-none"} {
		var groups []string
		if u == "u-authgroup" {
			groups = []string{"matrix-token-group"}
		}
		tokens[u] = iss.sign(t, idToken{email: u + "@example.com", groups: groups})
	}
	observe := func(u string) (grantsOf, error) {
		can := func(err error) (bool, error) {
			switch {
			case err == nil:
				return true, nil
			case apierrors.IsForbidden(err):
				return false, nil
			default:
				return false, err
			}
		}
		get := func(project, name string) (bool, error) {
			_, err := m.as(t, tokens[u], tenancy.ProjectPath(project)).CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
			return can(err)
		}
		var g grantsOf
		var errs []error
		collect := func(ok bool, err error) bool {
			if err != nil {
				errs = append(errs, err)
			}
			return ok
		}
		g.getDeep = collect(get(deep, "settings"))
		g.getFlat = collect(get(flat, "settings"))
		g.getOtherOrg = collect(get(x, "settings"))
		g.getOtherDeep = collect(get(deep, "other"))
		deepClient := m.as(t, tokens[u], tenancy.ProjectPath(deep)).CoreV1().ConfigMaps("default")
		_, err := deepClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "made-"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		g.createDeep = collect(can(err))
		_, err = deepClient.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"by": u}}, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		g.updateDeep = collect(can(err))
		if len(errs) > 0 {
			return g, fmt.Errorf("%v", errs)
		}
		return g, nil
	}
	want := map[string]grantsOf{
		"u-org":       {getDeep: true, getFlat: true, getOtherDeep: true},
		"u-folder":    {getDeep: true, getOtherDeep: true},
		"u-project":   {getFlat: true},
		"u-object":    {getDeep: true, updateDeep: true},
		"u-kind":      {getDeep: true, getFlat: true, getOtherDeep: true},
		"u-group":     {getDeep: true, getFlat: true, getOtherDeep: true},
		"u-authgroup": {getDeep: true, getOtherDeep: true},
		"u-inherit":   {getDeep: true, getOtherDeep: true, createDeep: true},
		"u-none":      {},
	}
	expect := func(what string, want map[string]grantsOf) {
		t.Helper()
		for u, w := range want {
			eventually(t, u+"'s grants"+what, func() error {
				got, err := observe(u)
				if err != nil {
					return err
				}
				if got != w {
					return fmt.Errorf("got %+v, want %+v", got, w)
				}
				return nil
			})
		}
	}
	expect("", want)

	// No IAM grant opens the all-projects view: it is for platform identities.
	for _, u := range []string{"u-org", "u-kind"} {
		if _, err := m.as(t, tokens[u], tenancy.AllProjectsPath).CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s lists configmaps of all projects: %v", u, err)
		}
	}

	// Moving inner out of outer takes deep out of u-folder's reach at once.
	innerObj, err := platform.Resource(foldersGVR).Get(ctx, inner, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedMap(innerObj.Object, map[string]any{"kind": "Organization", "name": o}, "spec", "parentRef"); err != nil {
		t.Fatal(err)
	}
	if _, err := platform.Resource(foldersGVR).Update(ctx, innerObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Revoking u-project's binding takes flat away.
	if err := platform.Resource(policyBindingsGVR).Namespace(orgNS).Delete(ctx, "u-project", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Removing u-group from the group takes its grants away.
	if err := platform.Resource(groupMembershipsGVR).Namespace(orgNS).Delete(ctx, "u-group-reads", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(" after the move and revocations", map[string]grantsOf{"u-folder": {}, "u-project": {}, "u-group": {}, "u-org": want["u-org"]})
}
