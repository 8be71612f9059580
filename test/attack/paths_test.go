package attack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// status sends one request with cfg's credentials and returns its HTTP status.
func status(t *testing.T, cfg *rest.Config, verb, path string, body string) int {
	t.Helper()
	return ask(t, cfg, verb, path, body, "").code
}

// Finding 3: the server's process-wide endpoints do not exist under a tenant
// URL, whatever RBAC the tenant holds there: a project's own cluster-admin
// grants nonResourceURLs "*".
func TestProcessWideEndpointsAreAbsentInTenants(t *testing.T) {
	org := organizationOf(t, malloryToken, "paths")
	project := projectIn(t, malloryToken, org, unique("paths"))
	clusterAdminIn(t, malloryToken, project, "mallory")
	for _, base := range []string{tenancy.ProjectPath(project), tenancy.OrganizationPath(org), tenancy.AllProjectsPath} {
		for _, p := range []struct{ verb, path, body string }{
			{"GET", "/metrics", ""},
			{"GET", "/debug/pprof/", ""},
			{"GET", "/debug/pprof/heap", ""},
			{"PUT", "/debug/flags/v", "9"},
			{"GET", "/debug/api_priority_and_fairness/dump_requests", ""},
			{"GET", "/logs/", ""},
			{"GET", "/readyz/etcd", ""},
			{"GET", "/", ""},
		} {
			for _, cfg := range []*rest.Config{at(malloryToken, base), adminAt(base)} {
				if code := status(t, cfg, p.verb, p.path, p.body); code != http.StatusNotFound {
					t.Errorf("%s %s%s: %d, want 404", p.verb, base, p.path, code)
				}
			}
		}
		for _, p := range []string{"/version", "/healthz", "/livez", "/readyz"} {
			if code := status(t, at(malloryToken, base), "GET", p, ""); code != http.StatusOK {
				t.Errorf("GET %s%s: %d, want 200", base, p, code)
			}
		}
	}
}

// Finding 8: nothing is created in a project being deleted, whatever the verb:
// POST, PUT creating on update, and server-side apply.
func TestNoCreatesInADeletingProject(t *testing.T) {
	org := organizationOf(t, malloryToken, "deleting")
	project := projectIn(t, malloryToken, org, unique("deleting"))
	c := kube(t, at(malloryToken, tenancy.ProjectPath(project)))
	// A finalizer keeps the project in deletion while the test writes.
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}
	if _, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dyn(t, at(malloryToken, tenancy.OrganizationPath(org))).Resource(projectsGVR).Delete(context.Background(), project, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "creates refused", func() error {
		_, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("create: %v", err)
		}
		return nil
	})
	if _, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "posted"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("POST in a deleting project: %v, want 403", err)
	}
	// Roles are created by a PUT of a name that does not exist yet.
	_, err := c.RbacV1().Roles("default").Update(context.Background(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "put"}}, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("PUT creating in a deleting project: %v, want 403", err)
	}
	if roles, err := c.RbacV1().Roles("default").List(context.Background(), metav1.ListOptions{}); err != nil || len(roles.Items) != 0 {
		t.Errorf("roles in the deleting project: %v, %v", roles, err)
	}
	_, err = c.CoreV1().ConfigMaps("default").Patch(context.Background(), "applied", types.ApplyPatchType,
		[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied"}}`), metav1.PatchOptions{FieldManager: "attacker"})
	if !apierrors.IsForbidden(err) {
		t.Errorf("server-side apply creating in a deleting project: %v, want 403", err)
	}
	list, err := c.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		if cm.Name != "held" && !strings.HasPrefix(cm.Name, "kube-root-ca") {
			t.Errorf("%s was created in a deleting project", cm.Name)
		}
	}
	// Updates of what is there still work: the owner releases the hold.
	if _, err := c.CoreV1().ConfigMaps("default").Patch(context.Background(), "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Finding 9: a project's OpenAPI documents describe what the project serves.
// The v3 index (served as text/plain) lists no platform-only group, the v3
// document of iam.miloapis.com has only the project's ServiceAccounts, and
// OpenAPI v2 has no platform-only paths or schemas.
func TestOpenAPIInProjectsShowsOnlyProjectKinds(t *testing.T) {
	org := organizationOf(t, malloryToken, "openapi")
	project := projectIn(t, malloryToken, org, unique("openapi"))
	get := func(path string) string {
		t.Helper()
		a := ask(t, at(malloryToken, tenancy.ProjectPath(project)), "GET", path, "", "")
		if a.code != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", path, a.code, a.body)
		}
		return a.body
	}
	for path, forbidden := range map[string][]string{
		"/openapi/v3": {"apiregistration.k8s.io", "resourcemanager.miloapis.com", "admissionregistration"},
		"/openapi/v3/apis/iam.miloapis.com/v1alpha1": {"policybindings", "PolicyBinding", "/roles", "v1alpha1.Role\""},
		"/openapi/v2": {"/apis/apiregistration.k8s.io/", "/apis/resourcemanager.miloapis.com/", "tokenreviews", "/apis/iam.miloapis.com/v1alpha1/roles"},
	} {
		body := get(path)
		for _, f := range forbidden {
			if strings.Contains(body, f) {
				t.Errorf("%s in a project mentions %q", path, f)
			}
		}
	}
	if body := get("/openapi/v3/apis/iam.miloapis.com/v1alpha1"); !strings.Contains(body, "serviceaccounts") {
		t.Errorf("the project's iam.miloapis.com document lost its ServiceAccounts: %.300s", body)
	}
	if body := get("/openapi/v2"); !strings.Contains(body, "/api/v1/namespaces/{namespace}/configmaps") {
		t.Errorf("the project's OpenAPI v2 lost configmaps")
	}
}

// Finding 11: in a project, a platform-only kind answers exactly as a kind
// the server does not know, and a hidden group's documents as a group that
// does not exist.
func TestPlatformOnlyAnswersAsUnknown(t *testing.T) {
	org := organizationOf(t, malloryToken, "unknown")
	project := projectIn(t, malloryToken, org, unique("unknown"))
	cfg := at(malloryToken, tenancy.ProjectPath(project))
	for hidden, unknown := range map[string]string{
		"/apis/apiregistration.k8s.io/v1/apiservices":              "/apis/example.com/v1/widgetsdefi",
		"/apis/apiregistration.k8s.io/v1/apiservices/x":            "/apis/example.com/v1/widgetsdefi/x",
		"/apis/resourcemanager.miloapis.com/v1alpha1/projects":     "/apis/example.com/v1alpha1/projectsxxx",
		"/apis/apiregistration.k8s.io":                             "/apis/example.comxxxxxxxxxxxx",
		"/apis/apiregistration.k8s.io/v1":                          "/apis/example.comxxxxxxxxxxxx/v1",
		"/apis/iam.miloapis.com/v1alpha1/namespaces/default/roles": "/apis/example.com/v1alpha1/namespaces/default/rolesxxxxxx",
		"/apis/authentication.k8s.io/v1/tokenreviews":              "/apis/example.com/v1/tokenreviewsxxxxxxxxx",
	} {
		a, b := ask(t, cfg, "GET", hidden, "", hidden), ask(t, cfg, "GET", unknown, "", unknown)
		if a != b {
			t.Errorf("GET %s answers %d %q, an unknown path %d %q", hidden, a.code, a.body, b.code, b.body)
		}
	}
}
