// Package attack is Milo's tenant-boundary attack suite: the real milo binary,
// ordinary tenant accounts, and every way across the boundary that a security
// review found or that held, each as a test. mallory is the attacker: she owns
// her own organization, and with it every role Milo lets a tenant hold. victor
// is the victim, owner of another organization. eve has an account and no
// access to anything.
package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

var (
	server *framework.Server
	// admin is the platform administrator's configuration (system:masters).
	admin *rest.Config
	seq   atomic.Int64
)

// Tokens of the suite's users (kube-apiserver's --token-auth-file format).
const (
	malloryToken = "mallory-token"
	victorToken  = "victor-token"
	eveToken     = "eve-token"
	tokenFile    = `mallory-token,mallory,mallory-uid,"tenants"
victor-token,victor,victor-uid,"tenants"
eve-token,eve,eve-uid,"tenants"
`
)

var (
	organizationsGVR = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "organizations"}
	projectsGVR      = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "projects"}
	foldersGVR       = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "folders"}
	rolesGVR         = schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "roles"}
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "milo-attack-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins, err := framework.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(tokenFile), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	server, err = framework.Start(bins.Milo, filepath.Join(dir, "data"), "--token-auth-file", tokens)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	admin, err = clientcmd.BuildConfigFromFlags("", server.Kubeconfig)
	if err == nil {
		admin.QPS, admin.Burst = 1000, 1000
		err = letTenantsCreateOrganizations()
	}
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	if exit, err := server.Stop(); err != nil || exit != 0 {
		fmt.Fprintf(os.Stderr, "stopping the server: exit %d, %v\n%s", exit, err, server.LogTail())
		code = 1
	}
	return code
}

// letTenantsCreateOrganizations is the sign-up a provider offers: every
// authenticated user may create an organization, and owns what they create.
func letTenantsCreateOrganizations() error {
	c, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "organization-creator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"resourcemanager.miloapis.com"}, Resources: []string{"organizations"}, Verbs: []string{"create"}}}},
		metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "organization-creators"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "organization-creator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}}},
		metav1.CreateOptions{})
	return err
}

// unique returns a name no other test uses.
func unique(base string) string { return fmt.Sprintf("%s-%d", base, seq.Add(1)) }

// at is the configuration of a token user (empty token: anonymous) at path
// ("" for the platform).
func at(token, path string) *rest.Config {
	cfg := rest.AnonymousClientConfig(admin)
	cfg.Host += path
	cfg.BearerToken = token
	return cfg
}

// adminAt is the platform administrator's configuration at path.
func adminAt(path string) *rest.Config {
	cfg := rest.CopyConfig(admin)
	cfg.Host += path
	return cfg
}

func kube(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dyn(t testing.TB, cfg *rest.Config) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func eventually(t testing.TB, what string, f func() error) {
	t.Helper()
	if err := framework.Eventually(time.Minute, f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func object(gvr schema.GroupVersionResource, kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

// organizationOf has the user with token create an organization, which they
// then own, and waits until it is Ready.
func organizationOf(t *testing.T, token, base string) string {
	t.Helper()
	org := unique(base)
	// The sign-up binding reaches the authorizer's cache a moment after it is made.
	eventually(t, "creating organization "+org, func() error {
		_, err := dyn(t, at(token, "")).Resource(organizationsGVR).Create(context.Background(),
			object(organizationsGVR, "Organization", org, map[string]any{}), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	eventually(t, "organization "+org+" Ready", func() error { return ready(organizationsGVR, org) })
	return org
}

// projectIn has the user with token create a project in their organization,
// through its context, and waits until it is Ready.
func projectIn(t *testing.T, token, org, name string) string {
	t.Helper()
	c := dyn(t, at(token, tenancy.OrganizationPath(org))).Resource(projectsGVR)
	eventually(t, "creating project "+name, func() error {
		_, err := c.Create(context.Background(), object(projectsGVR, "Project", name,
			map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": org}}), metav1.CreateOptions{})
		return err
	})
	eventually(t, "project "+name+" Ready", func() error { return ready(projectsGVR, name) })
	return name
}

func ready(gvr schema.GroupVersionResource, name string) error {
	u, err := dynamic.NewForConfigOrDie(admin).Resource(gvr).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
			return nil
		}
	}
	return fmt.Errorf("%s %s not Ready: %v", gvr.Resource, name, conds)
}

// deleteProject deletes a project as the user with token, through their
// organization's context, and waits until its name is released.
func deleteProject(t *testing.T, token, org, name string) {
	t.Helper()
	if err := dyn(t, at(token, tenancy.OrganizationPath(org))).Resource(projectsGVR).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting project %s: %v", name, err)
	}
	eventually(t, "project "+name+" gone", func() error {
		_, err := dynamic.NewForConfigOrDie(admin).Resource(projectsGVR).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}

// clusterAdminIn binds the project's own cluster-admin ClusterRole to user,
// as a project owner may: it grants every verb on every resource and
// nonResourceURLs "*" inside the project.
func clusterAdminIn(t *testing.T, token, project, user string) {
	t.Helper()
	c := kube(t, at(token, tenancy.ProjectPath(project)))
	eventually(t, "binding cluster-admin in "+project, func() error {
		_, err := c.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "own-" + user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}
