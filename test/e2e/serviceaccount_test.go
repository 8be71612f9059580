package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"go.miloapis.com/milo/pkg/iam/users"
	"go.miloapis.com/milo/pkg/tenancy"
)

// createServiceAccount creates namespace/name through c.
func createServiceAccount(t *testing.T, c kubernetes.Interface, namespace, name string) {
	t.Helper()
	if _, err := c.CoreV1().ServiceAccounts(namespace).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// bindServiceAccount binds a platform ClusterRole to a service account in one
// namespace (RoleBinding) or, with bindingNamespace "", project-wide.
func bindServiceAccount(t *testing.T, c kubernetes.Interface, bindingNamespace, clusterRole, saNamespace, sa string) {
	t.Helper()
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: sa}}
	meta := metav1.ObjectMeta{Name: sa + "-" + clusterRole}
	var err error
	if bindingNamespace == "" {
		_, err = c.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})
	} else {
		_, err = c.RbacV1().RoleBindings(bindingNamespace).Create(context.Background(), &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// awaitAllowed waits until the authorizer lets c's user do verb on
// resource of group in every namespace of where c points: a new binding counts once
// the authorizer's cache has it. It asks with a SelfSubjectAccessReview, which
// changes nothing.
func awaitAllowed(t *testing.T, c kubernetes.Interface, verb, group, resource string) {
	t.Helper()
	eventually(t, "allowed to "+verb+" "+resource, func() error {
		review, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !review.Status.Allowed {
			return fmt.Errorf("not allowed yet: %s", review.Status.Reason)
		}
		return nil
	})
}

// TestServiceAccountTokensWorkOnlyInTheirProject is the CI story: in
// project A a service account gets edit rights on one namespace through the
// project's RBAC and authenticates with a token issued by `kubectl create
// token`. The token works there and only there: project B has a service
// account of the same name with cluster-admin and still refuses it, and so
// does the platform; a platform token is refused in projects.
func TestServiceAccountTokensWorkOnlyInTheirProject(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "sa-a"), m.newProject(t, "sa-b")
	adminA, adminB := m.projectKube(t, a), m.projectKube(t, b)
	for _, ns := range []string{"apps", "other"} {
		createNamespace(t, adminA, ns)
	}
	createServiceAccount(t, adminA, "default", "ci")
	bindServiceAccount(t, adminA, "apps", "edit", "default", "ci")
	// B: the same name, far more rights.
	createServiceAccount(t, adminB, "default", "ci")
	bindServiceAccount(t, adminB, "", "cluster-admin", "default", "ci")

	r := m.kubectlWith(t, m.projectKubeconfig(t, a), "", "create", "token", "ci", "-n", "default")
	if r.err != nil {
		t.Fatalf("kubectl create token in %s: %v %s", a, r.err, r.stderr)
	}
	tokenA := strings.TrimSpace(r.stdout)

	ciA := m.as(t, tokenA, tenancy.ProjectPath(a))
	eventually(t, "A's service account edits its namespace", func() error {
		_, err := ciA.CoreV1().ConfigMaps("apps").Create(ctx, configMap("built"), metav1.CreateOptions{})
		return err
	})
	review, err := ciA.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Username; got != "system:serviceaccount:default:ci" {
		t.Fatalf("whoami in %s: %q", a, got)
	}
	if _, err := ciA.CoreV1().ConfigMaps("other").Create(ctx, configMap("built"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("A's service account in a namespace it has no binding in: %v, want Forbidden", err)
	}
	if _, err := ciA.CoreV1().Secrets("apps").Get(ctx, "anything", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("edit reads secrets of its namespace: %v, want NotFound", err)
	}

	// The token was just accepted, so the apiserver's token cache holds it:
	// B and the platform must still refuse it.
	for where, path := range map[string]string{"project " + b: tenancy.ProjectPath(b), "the platform": "", "the all-projects view": tenancy.AllProjectsPath,
		"organization acme": tenancy.OrganizationPath("acme")} {
		_, err := m.as(t, tokenA, path).CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Fatalf("A's token in %s: %v, want Unauthorized", where, err)
		}
	}

	// B's own token works in B and not in A.
	tokenB, err := adminB.CoreV1().ServiceAccounts("default").CreateToken(ctx, "ci", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "B's service account acts as B's cluster-admin", func() error {
		_, err := m.as(t, tokenB.Status.Token, tenancy.ProjectPath(b)).CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
		return err
	})
	if _, err := m.as(t, tokenB.Status.Token, tenancy.ProjectPath(a)).CoreV1().ConfigMaps("apps").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("B's token in A: %v, want Unauthorized", err)
	}

	// A platform service account's token works at the platform only.
	platform := m.kube(t)
	createNamespace(t, platform, "sa-tokens")
	createServiceAccount(t, platform, "sa-tokens", "ci")
	tokenP, err := platform.CoreV1().ServiceAccounts("sa-tokens").CreateToken(ctx, "ci", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.as(t, tokenP.Status.Token, "").AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("platform token at the platform: %v", err)
	}
	if _, err := m.as(t, tokenP.Status.Token, tenancy.ProjectPath(a)).CoreV1().ConfigMaps("apps").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("platform token in project %s: %v, want Unauthorized", a, err)
	}
}

// TestUsersAreRecordedOnTheirFirstRequest: a person's first authenticated
// request creates a User (named after the user name, which is kept in an
// annotation); service accounts and the system's identities are not people.
func TestUsersAreRecordedOnTheirFirstRequest(t *testing.T) {
	m := shared
	ctx := context.Background()
	if _, err := m.as(t, "carol-token", "").CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("carol at the platform: %v", err)
	}
	eventually(t, "carol recorded", func() error {
		u, err := m.dynamic(t).Resource(usersGVR).Get(ctx, "carol", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := u.GetAnnotations()[users.UsernameAnnotation]; got != "carol" {
			return fmt.Errorf("annotation %q", got)
		}
		return nil
	})
	list, err := m.dynamic(t).Resource(usersGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range list.Items {
		if name := u.GetAnnotations()[users.UsernameAnnotation]; strings.HasPrefix(name, "system:") {
			t.Errorf("User %s records %s", u.GetName(), name)
		}
	}
}
