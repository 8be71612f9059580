package attack

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Finding 1(c): a project name is reusable, its storage is not. mallory
// prepares a project with a cluster-admin binding for herself and a Secret,
// deletes it, and victor creates a project of the same name in his own
// organization: it starts empty, stored under another id, and mallory has no
// access to it.
func TestRecycledProjectNameStartsEmpty(t *testing.T) {
	malOrg := organizationOf(t, malloryToken, "recycle-mal")
	vicOrg := organizationOf(t, victorToken, "recycle-vic")
	name := projectIn(t, malloryToken, malOrg, unique("recycled"))
	clusterAdminIn(t, malloryToken, name, "mallory")
	mal := kube(t, at(malloryToken, tenancy.ProjectPath(name)))
	planted, err := mal.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldID := planted.Annotations[tenancy.IDAnnotationKey]

	deleteProject(t, malloryToken, malOrg, name)
	projectIn(t, victorToken, vicOrg, name)

	vic := kube(t, at(victorToken, tenancy.ProjectPath(name)))
	mine, err := vic.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "victors"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if newID := mine.Annotations[tenancy.IDAnnotationKey]; newID == "" || newID == oldID {
		t.Fatalf("the recycled name is stored under id %q, the old project's was %q", newID, oldID)
	}
	secrets, err := vic.CoreV1().Secrets("").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(secrets.Items) != 1 || secrets.Items[0].Name != "victors" {
		t.Fatalf("the new project holds %v, %v; want only victor's secret", secrets, err)
	}
	if _, err := vic.RbacV1().ClusterRoleBindings().Get(context.Background(), "own-mallory", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the old project's binding is visible in the new one: %v", err)
	}
	if _, err := mal.CoreV1().Secrets("default").Get(context.Background(), "victors", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("mallory reads the new project's secret: %v, want 403", err)
	}
}

// Finding 2: a watch outlives its tenant. A watch mallory opens in her
// project (for a day) ends when the project is deleted, and never carries an
// event of the project victor then creates under the same name.
func TestWatchEndsWithItsProject(t *testing.T) {
	malOrg := organizationOf(t, malloryToken, "watch-mal")
	vicOrg := organizationOf(t, victorToken, "watch-vic")
	name := projectIn(t, malloryToken, malOrg, unique("watched"))
	day := int64(86400)
	w, err := kube(t, at(malloryToken, tenancy.ProjectPath(name))).CoreV1().Secrets("").Watch(context.Background(), metav1.ListOptions{TimeoutSeconds: &day})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deleteProject(t, malloryToken, malOrg, name)
	ended := drain(t, w, time.Minute)
	if !ended {
		t.Fatal("the watch is still open a minute after its project was deleted")
	}

	// And one opened in an organization's context ends with the organization.
	ow, err := kube(t, at(malloryToken, tenancy.OrganizationPath(malOrg))).CoreV1().ConfigMaps("").Watch(context.Background(), metav1.ListOptions{TimeoutSeconds: &day})
	if err != nil {
		t.Fatal(err)
	}
	defer ow.Stop()
	if err := dyn(t, at(malloryToken, "")).Resource(organizationsGVR).Delete(context.Background(), malOrg, metav1.DeleteOptions{}); err != nil {
		// The owner deletes through the platform when allowed; otherwise the administrator does.
		if err := dyn(t, adminAt("")).Resource(organizationsGVR).Delete(context.Background(), malOrg, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if !drain(t, ow, 2*time.Minute) {
		t.Fatal("the organization context's watch is still open after the organization was deleted")
	}

	// The name is victor's now; mallory's ended watch carried none of it.
	projectIn(t, victorToken, vicOrg, name)
	if _, err := kube(t, at(victorToken, tenancy.ProjectPath(name))).CoreV1().Secrets("default").Create(context.Background(),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "victors"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// drain reads w until it closes or timeout passes, and reports whether it closed.
func drain(t *testing.T, w watch.Interface, timeout time.Duration) bool {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return true
			}
			if ev.Type == watch.Error {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// Work queued for a project carries its storage id: a request naming another
// id (a deleted project of the same name) is refused, so stale work never
// lands in a later project of that name.
func TestRequestsForAnotherStorageIDAreRefused(t *testing.T) {
	org := organizationOf(t, malloryToken, "expect")
	name := projectIn(t, malloryToken, org, unique("expect"))
	c := kube(t, at(malloryToken, tenancy.ProjectPath(name)))
	cm, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := cm.Annotations[tenancy.IDAnnotationKey]
	for header, want := range map[string]int{id: 200, "p.00000000-0000-0000-0000-000000000000": 404, "": 200} {
		cfg := at(malloryToken, tenancy.ProjectPath(name))
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", cfg.Host+"/api/v1/namespaces/default/configmaps/probe", nil)
		if header != "" {
			req.Header.Set(tenancy.ExpectedProjectIDHeader, header)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("expected id %q: %d, want %d", header, resp.StatusCode, want)
		}
	}
}
