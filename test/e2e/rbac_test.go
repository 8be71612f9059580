package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

func TestProjectRBACAppliesOnlyInItsProject(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "rbac-a"), m.newProject(t, "rbac-b")
	adminA, adminB := m.projectKube(t, a), m.projectKube(t, b)
	for _, c := range []kubernetes.Interface{adminA, adminB} {
		createNamespace(t, c, "default")
		createConfigMap(t, c, "default", "settings", nil, nil)
	}
	aliceA, aliceB, alicePlatform := m.as(t, "alice-token", tenancy.ProjectPath(a)), m.as(t, "alice-token", tenancy.ProjectPath(b)), m.as(t, "alice-token", "")
	bobA := m.as(t, "bob-token", tenancy.ProjectPath(a))

	if _, err := aliceA.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice without a binding: %v, want Forbidden", err)
	}

	// A namespaced grant in project A.
	if _, err := adminA.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "cm-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminA.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-reads"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Authorization reads the watch cache, which sees a new binding within milliseconds.
	eventually(t, "alice reads with her binding in A", func() error {
		_, err := aliceA.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
		return err
	})
	if _, err := aliceA.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice lists secrets in A: %v, want Forbidden", err)
	}
	if _, err := bobA.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob uses alice's binding: %v", err)
	}
	if _, err := aliceB.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("A's binding reaches B: %v", err)
	}
	if _, err := alicePlatform.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("A's binding reaches the platform: %v", err)
	}

	// A project-wide grant naming the platform's cluster-admin role.
	if _, err := adminA.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-admin"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "alice acts as A's cluster-admin", func() error {
		_, err := aliceA.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}, metav1.CreateOptions{})
		return err
	})
	if _, err := aliceB.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("A's cluster-admin binding reaches B: %v", err)
	}
	if _, err := alicePlatform.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("A's cluster-admin binding reaches the platform: %v", err)
	}
	all := m.as(t, "alice-token", tenancy.AllProjectsPath)
	if _, err := all.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("A's cluster-admin binding opens the all-projects view: %v", err)
	}

	// kubectl auth can-i answers per project. In B alice holds nothing, so
	// she is an outsider there: even the question is refused.
	kc := m.projectKubeconfig(t, a)
	if r := m.kubectlWith(t, kc, "", "auth", "can-i", "create", "secrets", "--as", "alice"); strings.TrimSpace(r.stdout) != "yes" {
		t.Fatalf("can-i create secrets as alice in %s: %q %s, want yes", a, r.stdout, r.stderr)
	}
	kc = m.projectKubeconfig(t, b)
	if r := m.kubectlWith(t, kc, "", "auth", "can-i", "create", "secrets", "--as", "alice"); r.err == nil || strings.TrimSpace(r.stdout) == "yes" || !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("can-i create secrets as alice in %s: %q %s, want a refusal", b, r.stdout, r.stderr)
	}
}

// eventually retries f until it succeeds, for state that reaches a cache within moments.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	eventuallyWithin(t, time.Minute, what, f)
}

// eventuallyWithin retries f until it succeeds or timeout passes.
func eventuallyWithin(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	if err := framework.Eventually(timeout, f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// A user with no access gets the same answer for an existing project as for one
// that does not exist: existence is checked only after authorization.
func TestProjectExistenceIsNotRevealedWithoutAccess(t *testing.T) {
	m := shared
	ctx := context.Background()
	existing := m.newProject(t, "secret-project")
	createNamespace(t, m.projectKube(t, existing), "default")
	missing := "no-such-project-" + existing

	for _, token := range []string{"alice-token", ""} {
		var msgs []string
		for _, p := range []string{existing, missing} {
			c := m.as(t, token, tenancy.ProjectPath(p))
			_, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			if !apierrors.IsForbidden(err) {
				t.Fatalf("token %q, project %s: %v, want Forbidden", token, p, err)
			}
			msgs = append(msgs, err.Error())
		}
		if msgs[0] != msgs[1] {
			t.Fatalf("answers differ for an existing and a missing project:\n%s\n%s", msgs[0], msgs[1])
		}
	}
}
