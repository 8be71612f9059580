package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

var (
	organizationsGVR = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "organizations"}
)

// dynamicAs is a dynamic client under path that authenticates with a bearer token.
func (m *milo) dynamicAs(t testing.TB, token, path string) dynamic.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(m.configAt(t, path))
	cfg.BearerToken = token
	return dynamicFor(t, cfg)
}

// tokenKubeconfig writes a kubeconfig for a token user at path ("" for the platform).
func (m *milo) tokenKubeconfig(t *testing.T, token, path string) string {
	t.Helper()
	cfg := m.configAt(t, path)
	file := filepath.Join(t.TempDir(), "kubeconfig")
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: milo, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: c, context: {cluster: milo, user: u}}]
current-context: c
`, cfg.Host, b64(cfg.CAData), token)
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func objectOf(kind, name string, spec map[string]any) *unstructured.Unstructured {
	group := "resourcemanager.miloapis.com/v1alpha1"
	if kind == "PolicyBinding" {
		group = "iam.miloapis.com/v1alpha1"
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": group, "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

// TestIAMStory is the story: alice creates an organization and owns
// it; she grants bob viewer on a folder; bob reads every project below it —
// created later or moved in — and nothing else; carol, with no binding, gets
// the same answer for an existing project as for a missing one.
func TestIAMStory(t *testing.T) {
	m := shared
	ctx := context.Background()
	n := projectSeq.Add(1)
	org := fmt.Sprintf("iam-%d", n)
	name := func(s string) string { return fmt.Sprintf("%s-%s", org, s) }

	m.createOrganizationAs(t, "alice-token", org)

	// As its owner she builds the organization through its context.
	aliceOrg := m.dynamicAs(t, "alice-token", tenancy.OrganizationPath(org))
	eventually(t, "alice, owner, creates a folder in her organization", func() error {
		_, err := aliceOrg.Resource(foldersGVR).Create(ctx, objectOf("Folder", name("team"), map[string]any{
			"parentRef": map[string]any{"kind": "Organization", "name": org}}), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	for _, p := range []struct{ name, kind, parent string }{{name("web"), "Folder", name("team")}, {name("api"), "Organization", org}} {
		if _, err := aliceOrg.Resource(projectsGVR).Create(ctx, objectOf("Project", p.name, map[string]any{
			"ownerRef": map[string]any{"kind": p.kind, "name": p.parent}}), metav1.CreateOptions{}); err != nil {
			t.Fatalf("alice creates project %s: %v", p.name, err)
		}
		m.waitProjectReady(t, p.name)
		createConfigMap(t, m.as(t, "alice-token", tenancy.ProjectPath(p.name)), "default", "settings", nil, nil)
	}

	bobIn := func(project string) error {
		_, err := m.as(t, "bob-token", tenancy.ProjectPath(project)).CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
		return err
	}
	if err := bobIn(name("web")); !apierrors.IsForbidden(err) {
		t.Fatalf("bob before any grant: %v", err)
	}
	// alice grants bob viewer on the folder.
	if _, err := aliceOrg.Resource(policyBindingsGVR).Namespace(tenancy.OrganizationNamespace(org)).Create(ctx, objectOf("PolicyBinding", "bob-views-team", map[string]any{
		"roleRef":          map[string]any{"name": "viewer", "namespace": "milo-system"},
		"subjects":         []any{map[string]any{"kind": "User", "name": "bob"}},
		"resourceSelector": map[string]any{"resourceRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Folder", "name": name("team")}},
	}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice grants bob: %v", err)
	}
	eventuallyWithin(t, 5e9, "bob reads the project below the folder", func() error { return bobIn(name("web")) })
	if _, err := m.dynamicAs(t, "bob-token", "").Resource(projectsGVR).Get(ctx, name("web"), metav1.GetOptions{}); err != nil {
		t.Fatalf("bob gets the Project object: %v", err)
	}
	if err := bobIn(name("api")); !apierrors.IsForbidden(err) {
		t.Fatalf("bob reads a project outside the folder: %v", err)
	}
	_, err := m.as(t, "bob-token", tenancy.ProjectPath(name("web"))).CoreV1().ConfigMaps("default").Create(ctx, configMap("bobs"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("bob, viewer, writes: %v", err)
	}
	// kubectl auth can-i answers the same inside the project.
	bobWeb := m.tokenKubeconfig(t, "bob-token", tenancy.ProjectPath(name("web")))
	if out := m.kubectlWith(t, bobWeb, "", "auth", "can-i", "get", "configmaps"); strings.TrimSpace(out.stdout) != "yes" {
		t.Fatalf("can-i get configmaps: %q %q", out.stdout, out.stderr)
	}
	if out := m.kubectlWith(t, bobWeb, "", "auth", "can-i", "create", "configmaps"); strings.TrimSpace(out.stdout) != "no" {
		t.Fatalf("can-i create configmaps: %q %q", out.stdout, out.stderr)
	}

	// A project created later below the folder, and one moved into it, are readable at once.
	if _, err := aliceOrg.Resource(projectsGVR).Create(ctx, objectOf("Project", name("later"), map[string]any{
		"ownerRef": map[string]any{"kind": "Folder", "name": name("team")}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.waitProjectReady(t, name("later"))
	createConfigMap(t, m.projectKube(t, name("later")), "default", "settings", nil, nil)
	eventuallyWithin(t, 5e9, "bob reads the project created later", func() error { return bobIn(name("later")) })
	if _, err := aliceOrg.Resource(projectsGVR).Patch(ctx, name("api"), types.MergePatchType,
		[]byte(`{"spec":{"ownerRef":{"kind":"Folder","name":"`+name("team")+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("alice moves api into the folder: %v", err)
	}
	eventuallyWithin(t, 5e9, "bob reads the project moved in", func() error { return bobIn(name("api")) })

	// carol: the same answer for an existing project of acme and a missing one.
	var answers []string
	for _, p := range []string{name("web"), name("nonexistent")} {
		_, err := m.as(t, "carol-token", tenancy.ProjectPath(p)).CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("carol in %s: %v", p, err)
		}
		answers = append(answers, err.Error())
	}
	if answers[0] != answers[1] {
		t.Fatalf("carol tells an existing project from a missing one:\n%s\n%s", answers[0], answers[1])
	}
	// bob cannot grant himself more, nor touch the organization's bindings.
	_, err = m.dynamicAs(t, "bob-token", tenancy.OrganizationPath(org)).Resource(policyBindingsGVR).Namespace(tenancy.OrganizationNamespace(org)).
		Create(ctx, objectOf("PolicyBinding", "bob-escalates", map[string]any{
			"roleRef":          map[string]any{"name": "owner", "namespace": "milo-system"},
			"subjects":         []any{map[string]any{"kind": "User", "name": "bob"}},
			"resourceSelector": map[string]any{"resourceRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Organization", "name": org}},
		}), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("bob creates a binding: %v", err)
	}

	// Revoking takes effect at once.
	if err := aliceOrg.Resource(policyBindingsGVR).Namespace(tenancy.OrganizationNamespace(org)).Delete(ctx, "bob-views-team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 5e9, "bob loses access", func() error {
		if err := bobIn(name("web")); !apierrors.IsForbidden(err) {
			return fmt.Errorf("bob still reads: %v", err)
		}
		return nil
	})
}

// A binding made in one organization grants nothing in another, whatever it names.
func TestBindingsDoNotCrossOrganizations(t *testing.T) {
	m := shared
	ctx := context.Background()
	victim := m.newProject(t, "iam-victim") // in acme
	createConfigMap(t, m.projectKube(t, victim), "default", "settings", nil, nil)
	other := fmt.Sprintf("iam-other-%d", projectSeq.Add(1))
	if err := m.ensureOrganization(other); err != nil {
		t.Fatal(err)
	}
	m.mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=60s", "organization/"+other)
	for _, ref := range []map[string]any{
		{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project", "name": victim},
		{"apiGroup": "resourcemanager.miloapis.com", "kind": "Organization", "name": "acme"},
	} {
		_, err := m.dynamic(t).Resource(policyBindingsGVR).Namespace(tenancy.OrganizationNamespace(other)).Create(ctx, objectOf("PolicyBinding", "reach-"+strings.ToLower(ref["kind"].(string)), map[string]any{
			"roleRef":          map[string]any{"name": "owner", "namespace": "milo-system"},
			"subjects":         []any{map[string]any{"kind": "User", "name": "carol"}},
			"resourceSelector": map[string]any{"resourceRef": ref},
		}), metav1.CreateOptions{})
		wantInvalid(t, err, "spec.resourceSelector.resourceRef.name", "organization "+other)
	}
	// Bindings outside milo-system and organizations' namespaces would grant nothing: refused.
	_, err := m.dynamic(t).Resource(policyBindingsGVR).Namespace("default").Create(ctx, objectOf("PolicyBinding", "nowhere", map[string]any{
		"roleRef":          map[string]any{"name": "owner", "namespace": "milo-system"},
		"subjects":         []any{map[string]any{"kind": "User", "name": "carol"}},
		"resourceSelector": map[string]any{"resourceRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Organization", "name": other}},
	}), metav1.CreateOptions{})
	wantInvalid(t, err, "metadata.namespace", "take effect only in milo-system")
	// Nor may a membership in one organization join a Group of another.
	_, err = m.dynamic(t).Resource(schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "groupmemberships"}).
		Namespace(tenancy.OrganizationNamespace(other)).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "GroupMembership", "metadata": map[string]any{"name": "join-acme-admins"},
		"spec": map[string]any{"groupRef": map[string]any{"name": "admins", "namespace": tenancy.OrganizationNamespace("acme")}, "userRef": map[string]any{"name": "carol"}},
	}}, metav1.CreateOptions{})
	wantInvalid(t, err, "spec.groupRef.namespace", "its own namespace")
	// A grant carol does hold, in her organization, shows the bindings are indexed.
	if _, err := m.dynamic(t).Resource(policyBindingsGVR).Namespace(tenancy.OrganizationNamespace(other)).Create(ctx, objectOf("PolicyBinding", "carol-owns", map[string]any{
		"roleRef":          map[string]any{"name": "owner", "namespace": "milo-system"},
		"subjects":         []any{map[string]any{"kind": "User", "name": "carol"}},
		"resourceSelector": map[string]any{"resourceRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Organization", "name": other}},
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 5e9, "carol owns her organization", func() error {
		_, err := m.dynamicAs(t, "carol-token", "").Resource(organizationsGVR).Get(ctx, other, metav1.GetOptions{})
		return err
	})
	if _, err := m.as(t, "carol-token", tenancy.ProjectPath(victim)).CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a binding of organization %s reaches a project of acme: %v", other, err)
	}
}

// createOrganizationAs lets every authenticated user create organizations
// (platform RBAC, as operators would) and creates org with token; it returns
// once the organization is Ready.
func (m *milo) createOrganizationAs(t *testing.T, token, org string) {
	t.Helper()
	ctx := context.Background()
	if _, err := m.kube(t).RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "organization-creator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"resourcemanager.miloapis.com"}, Resources: []string{"organizations"}, Verbs: []string{"create"}}}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := m.kube(t).RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "organization-creators"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "organization-creator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	creator := m.dynamicAs(t, token, "")
	eventually(t, "creating organization "+org, func() error {
		_, err := creator.Resource(organizationsGVR).Create(ctx, objectOf("Organization", org, map[string]any{}), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	m.mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=60s", "organization/"+org)
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

var rolesGVR = schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "roles"}

func role(name string, perms []string, inherits ...string) *unstructured.Unstructured {
	var inherited []any
	for _, in := range inherits {
		inherited = append(inherited, map[string]any{"name": in})
	}
	var included []any
	for _, p := range perms {
		included = append(included, p)
	}
	spec := map[string]any{"includedPermissions": included}
	if inherited != nil {
		spec["inheritedRoles"] = inherited
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "Role",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

func TestRolesFlattenInheritanceAndRefuseCycles(t *testing.T) {
	m := shared
	ctx := context.Background()
	roles := m.dynamic(t).Resource(rolesGVR).Namespace(tenancy.OrganizationNamespace("acme"))
	n := projectSeq.Add(1)
	a, b := fmt.Sprintf("role-a-%d", n), fmt.Sprintf("role-b-%d", n)
	// a inherits b, which does not exist yet: accepted, reported.
	if _, err := roles.Create(ctx, role(a, []string{"core/configmaps.get"}, b), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	status := func(name string) (string, []any, error) {
		r, err := roles.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", nil, err
		}
		perms, _, _ := unstructured.NestedSlice(r.Object, "status", "effectivePermissions")
		conds, _, _ := unstructured.NestedSlice(r.Object, "status", "conditions")
		for _, c := range conds {
			if cm, ok := c.(map[string]any); ok && cm["type"] == "Ready" {
				return fmt.Sprint(cm["status"], ": ", cm["message"]), perms, nil
			}
		}
		return "", perms, nil
	}
	eventually(t, "a reports its missing inherited role", func() error {
		ready, _, err := status(a)
		if err != nil || !strings.Contains(ready, "False") || !strings.Contains(ready, b+" does not exist") {
			return fmt.Errorf("Ready %q %v", ready, err)
		}
		return nil
	})
	if _, err := roles.Create(ctx, role(b, []string{"core/secrets.get"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a flattens b's permissions", func() error {
		ready, perms, err := status(a)
		if err != nil || !strings.HasPrefix(ready, "True") || fmt.Sprint(perms) != "[core/configmaps.get core/secrets.get]" {
			return fmt.Errorf("Ready %q, effective %v, %v", ready, perms, err)
		}
		return nil
	})
	// b inheriting a would close a cycle.
	eventually(t, "the cycle is refused", func() error {
		_, err := roles.Update(ctx, func() *unstructured.Unstructured {
			r, _ := roles.Get(ctx, b, metav1.GetOptions{})
			unstructured.SetNestedSlice(r.Object, []any{map[string]any{"name": a}}, "spec", "inheritedRoles") //nolint:errcheck
			return r
		}(), metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cycle") {
			return fmt.Errorf("got %v, want 422 naming the cycle", err)
		}
		return nil
	})

	// A permission of a kind no ProtectedResource registers is refused (a
	// typo would grant nothing); a Role annotated for a migration is
	// accepted and reports it; registering the kind settles it.
	c := fmt.Sprintf("role-c-%d", n)
	roleC := role(c, []string{"core/configmap.get", "example.com/widgets.get", "core/configmaps/status.get", "*/*.list"})
	if _, err := roles.Create(ctx, roleC, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), `"core/configmap.get": no ProtectedResource registers`) || strings.Contains(err.Error(), "configmaps/status") {
		t.Fatalf("a Role granting unregistered permissions: %v, want 422 naming them", err)
	}
	roleC.SetAnnotations(map[string]string{"iam.miloapis.com/allow-unregistered-permissions": "true"})
	if _, err := roles.Create(ctx, roleC, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "c reports its unregistered permissions", func() error {
		ready, _, err := status(c)
		if err != nil || !strings.HasPrefix(ready, "False") || !strings.Contains(ready, "registers core/configmap.get, example.com/widgets.get (") {
			return fmt.Errorf("Ready %q %v", ready, err)
		}
		return nil
	})
	widgets := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "ProtectedResource",
		"metadata": map[string]any{"name": fmt.Sprintf("widgets-%d.example.com", n)},
		"spec": map[string]any{"serviceRef": map[string]any{"name": "example.com"}, "kind": "Widget", "plural": "widgets", "singular": "widget",
			"permissions": []any{"get", "list"}, "parentResources": []any{map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project"}}}}}
	if _, err := m.dynamic(t).Resource(protectedResourcesGVR).Create(ctx, widgets, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.dynamic(t).Resource(protectedResourcesGVR).Delete(ctx, widgets.GetName(), metav1.DeleteOptions{})
	}) //nolint:errcheck
	eventually(t, "c reports only the typo", func() error {
		ready, _, err := status(c)
		if err != nil || !strings.Contains(ready, "registers core/configmap.get (") {
			return fmt.Errorf("Ready %q %v", ready, err)
		}
		return nil
	})
	// The platform roles use registered permissions only.
	for _, name := range []string{"viewer", "editor", "owner"} {
		r, err := m.dynamic(t).Resource(rolesGVR).Namespace("milo-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !hierarchyReady(r) {
			t.Errorf("platform role %s is not Ready: %v", name, r.Object["status"])
		}
	}
}

var protectedResourcesGVR = schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "protectedresources"}

func hierarchyReady(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m["status"] == "True"
		}
	}
	return false
}

// rulesOf is what SelfSubjectRulesReview says c may do in namespace, as
// "group/resource:verb" strings.
func rulesOf(t *testing.T, c kubernetes.Interface, namespace string) map[string]bool {
	t.Helper()
	review, err := c.AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(),
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range review.Status.ResourceRules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[g+"/"+res+":"+v] = true
				}
			}
		}
	}
	return out
}

// TestAuthCanIInProjectsAndOrganizations: kubectl auth can-i, and can-i
// --list (SelfSubjectRulesReview), answer with Milo IAM's grants and the
// project's own RBAC, per project and per organization, and nothing of
// other projects.
func TestAuthCanIInProjectsAndOrganizations(t *testing.T) {
	m := shared
	ctx := context.Background()
	org := fmt.Sprintf("can-i-%d", projectSeq.Add(1))
	m.createOrganizationAs(t, "alice-token", org)
	aliceOrg := m.dynamicAs(t, "alice-token", tenancy.OrganizationPath(org))
	web, other := org+"-web", org+"-other"
	for _, p := range []string{web, other} {
		eventually(t, "alice creates project "+p, func() error {
			_, err := aliceOrg.Resource(projectsGVR).Create(ctx, objectOf("Project", p, map[string]any{
				"ownerRef": map[string]any{"kind": "Organization", "name": org}}), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
		// The owner writes into the new project at once: IAM learns its
		// ancestry on the spot (its informer may not have it yet), and the
		// initialization gate answers 503 until it is Ready, which client-go
		// retries.
		createConfigMap(t, m.as(t, "alice-token", tenancy.ProjectPath(p)), "default", "first", nil, nil)
	}
	// bob: IAM viewer on web; in web's RBAC, create configmaps in default.
	if _, err := aliceOrg.Resource(policyBindingsGVR).Namespace(tenancy.OrganizationNamespace(org)).Create(ctx, objectOf("PolicyBinding", "bob-views-web", map[string]any{
		"roleRef":          map[string]any{"name": "viewer", "namespace": "milo-system"},
		"subjects":         []any{map[string]any{"kind": "User", "name": "bob"}},
		"resourceSelector": map[string]any{"resourceRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project", "name": web}},
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	aliceWeb := m.as(t, "alice-token", tenancy.ProjectPath(web))
	if _, err := aliceWeb.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "cm-writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := aliceWeb.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bob-writes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm-writer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	bobWeb := m.as(t, "bob-token", tenancy.ProjectPath(web))
	eventually(t, "bob's rules in web", func() error {
		rules := rulesOf(t, bobWeb, "default")
		for _, want := range []string{"/configmaps:get", "/configmaps:list", "/configmaps:create"} {
			if !rules[want] {
				return fmt.Errorf("no %s in %v", want, rules)
			}
		}
		return nil
	})
	if rules := rulesOf(t, bobWeb, "kube-system"); rules["/configmaps:create"] || !rules["/configmaps:get"] {
		t.Fatalf("bob's rules in web's kube-system: the RoleBinding is in default, IAM covers the project: %v", rules)
	}
	// In a project where bob holds nothing he is an outsider: even the review
	// is refused, as it is in a project that does not exist.
	if _, err := m.as(t, "bob-token", tenancy.ProjectPath(other)).AuthorizationV1().SelfSubjectRulesReviews().Create(ctx,
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "default"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob's rules review in %s, where he holds nothing: %v, want 403", other, err)
	}
	// The real kubectl, with bob's kubeconfig for web.
	bobKubeconfig := m.tokenKubeconfig(t, "bob-token", tenancy.ProjectPath(web))
	r := m.kubectlWith(t, bobKubeconfig, "", "auth", "can-i", "--list", "-n", "default")
	if r.err != nil || !regexp.MustCompile(`(?m)^configmaps\s.*\[.*\bget\b.*\bcreate\b.*\]`).MatchString(r.stdout) {
		t.Fatalf("kubectl auth can-i --list as bob in web: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	for verb, want := range map[string]string{"get": "yes", "create": "yes", "delete": "no"} {
		r := m.kubectlWith(t, bobKubeconfig, "", "auth", "can-i", verb, "configmaps", "-n", "default")
		if strings.TrimSpace(r.stdout) != want {
			t.Fatalf("can-i %s configmaps as bob in web: %q %s, want %s", verb, r.stdout, r.stderr, want)
		}
	}

	// In the organization's context: alice owns it; bob, with grants on a
	// project only, has nothing there, so even his question is refused.
	aliceOrgKubeconfig := m.tokenKubeconfig(t, "alice-token", tenancy.OrganizationPath(org))
	if r := m.kubectlWith(t, aliceOrgKubeconfig, "", "auth", "can-i", "create", "projects.resourcemanager.miloapis.com"); strings.TrimSpace(r.stdout) != "yes" {
		t.Fatalf("can-i create projects in %s as its owner: %q %s, want yes", org, r.stdout, r.stderr)
	}
	bobOrgKubeconfig := m.tokenKubeconfig(t, "bob-token", tenancy.OrganizationPath(org))
	if r := m.kubectlWith(t, bobOrgKubeconfig, "", "auth", "can-i", "create", "projects.resourcemanager.miloapis.com"); strings.TrimSpace(r.stdout) == "yes" || !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("can-i create projects in %s as a project's viewer: %q %s, want a refusal", org, r.stdout, r.stderr)
	}
	if rules := rulesOf(t, m.as(t, "alice-token", tenancy.OrganizationPath(org)), "default"); !rules["*/*:*"] {
		t.Fatalf("the owner's rules in her organization: %v", rules)
	}
	if _, err := m.as(t, "bob-token", tenancy.OrganizationPath(org)).AuthorizationV1().SelfSubjectRulesReviews().Create(ctx,
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "default"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a project's viewer's rules review in the organization: %v, want 403", err)
	}

	// A kind registered under the Organization only (parentResources) is
	// granted by a binding on the organization, never by one on a project;
	// the same Role's kinds under Project are granted on the project.
	plural := fmt.Sprintf("gadgets%d", projectSeq.Add(1))
	gadgets := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "ProtectedResource",
		"metadata": map[string]any{"name": plural + ".example.com"},
		"spec": map[string]any{"serviceRef": map[string]any{"name": "example.com"}, "kind": "Gadget", "plural": plural, "singular": "gadget",
			"permissions": []any{"get"}, "parentResources": []any{map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Organization"}}}}}
	if _, err := m.dynamic(t).Resource(protectedResourcesGVR).Create(ctx, gadgets, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.dynamic(t).Resource(protectedResourcesGVR).Delete(ctx, gadgets.GetName(), metav1.DeleteOptions{}) //nolint:errcheck
	})
	orgNamespace := tenancy.OrganizationNamespace(org)
	eventually(t, "alice creates a Role granting gadgets", func() error {
		_, err := aliceOrg.Resource(rolesGVR).Namespace(orgNamespace).Create(ctx, role("gadget-reader", []string{"example.com/" + plural + ".get", "core/configmaps.delete"}), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err // 422 until the server's index has the ProtectedResource
	})
	bindOn := func(name, kind, target string) {
		t.Helper()
		if _, err := aliceOrg.Resource(policyBindingsGVR).Namespace(orgNamespace).Create(ctx, objectOf("PolicyBinding", name, map[string]any{
			"roleRef":          map[string]any{"name": "gadget-reader", "namespace": orgNamespace},
			"subjects":         []any{map[string]any{"kind": "User", "name": "bob"}},
			"resourceSelector": map[string]any{"resourceRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": kind, "name": target}},
		}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	can := func(verb, group, resource string) bool {
		t.Helper()
		review, err := bobWeb.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: verb, Group: group, Resource: resource}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
	bindOn("bob-gadgets-on-web", "Project", web)
	eventually(t, "the binding on web grants its Project kinds", func() error {
		if !can("delete", "", "configmaps") {
			return fmt.Errorf("bob cannot delete configmaps in web yet")
		}
		return nil
	})
	if can("get", "example.com", plural) {
		t.Fatal("a binding on a project grants a kind registered under the organization only")
	}
	bindOn("bob-gadgets-on-org", "Organization", org)
	eventually(t, "the binding on the organization grants gadgets in web", func() error {
		if !can("get", "example.com", plural) {
			return fmt.Errorf("bob cannot get gadgets in web")
		}
		return nil
	})
}
