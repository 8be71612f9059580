package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

// hierarchyYAML is an organization with a nested folder chain and two projects.
func hierarchyYAML(org string) string {
	return fmt.Sprintf(`apiVersion: resourcemanager.miloapis.com/v1alpha1
kind: Organization
metadata: {name: %[1]s}
---
apiVersion: resourcemanager.miloapis.com/v1alpha1
kind: Folder
metadata: {name: %[1]s-team}
spec: {parentRef: {kind: Organization, name: %[1]s}}
---
apiVersion: resourcemanager.miloapis.com/v1alpha1
kind: Folder
metadata: {name: %[1]s-sub}
spec: {parentRef: {kind: Folder, name: %[1]s-team}}
---
apiVersion: resourcemanager.miloapis.com/v1alpha1
kind: Project
metadata: {name: %[1]s-web}
spec: {ownerRef: {kind: Folder, name: %[1]s-sub}}
---
apiVersion: resourcemanager.miloapis.com/v1alpha1
kind: Project
metadata: {name: %[1]s-api}
spec: {ownerRef: {kind: Organization, name: %[1]s}}
`, org)
}

func TestOrganizationDeletionCascadesWithKubectl(t *testing.T) {
	m := shared
	ctx := context.Background()
	org := fmt.Sprintf("cascade-%d", projectSeq.Add(1))
	m.mustKubectl(t, hierarchyYAML(org), "apply", "-f", "-")
	m.mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=60s", "organization/"+org,
		"folder/"+org+"-team", "folder/"+org+"-sub", "project/"+org+"-web", "project/"+org+"-api")
	createConfigMap(t, m.projectKube(t, org+"-web"), "default", "data", nil, nil)
	// An object in the organization's namespace that holds the deletion until released.
	orgNS := tenancy.OrganizationNamespace(org)
	if _, err := m.kube(t).CoreV1().ConfigMaps(orgNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bystander := m.newProject(t, "cascade-bystander")

	m.mustKubectl(t, "", "delete", "organization", org, "--wait=false")
	eventually(t, "the organization waits for the object in its namespace", func() error {
		out := m.mustKubectl(t, "", "get", "organization", org, "-o", `jsonpath={.status.conditions[?(@.type=="ResourceCleanup")].message}`)
		if !strings.Contains(out, "configmaps "+orgNS+"/held") {
			return fmt.Errorf("ResourceCleanup: %q", out)
		}
		return nil
	})
	// Its folders and projects went first.
	for _, obj := range []string{"folder/" + org + "-team", "folder/" + org + "-sub", "project/" + org + "-web", "project/" + org + "-api"} {
		if r := m.kubectl(t, "", "get", obj); r.err == nil || !strings.Contains(r.stderr, "NotFound") {
			t.Fatalf("%s survived its organization's deletion: %s %s", obj, r.stdout, r.stderr)
		}
	}
	// Nothing new may appear in an organization being deleted.
	r := m.kubectl(t, "apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Project\nmetadata: {name: "+org+"-late}\nspec: {ownerRef: {kind: Organization, name: "+org+"}}\n", "create", "-f", "-")
	if r.err == nil || !strings.Contains(r.stderr, "Forbidden") || !strings.Contains(r.stderr, "being deleted") {
		t.Fatalf("creating a project in an organization being deleted: %v %s", r.err, r.stderr)
	}

	if _, err := m.kube(t).CoreV1().ConfigMaps(orgNS).Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	m.mustKubectl(t, "", "wait", "--for=delete", "--timeout=60s", "organization/"+org)
	if _, err := m.kube(t).CoreV1().Namespaces().Get(ctx, orgNS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s survived its organization: %v", orgNS, err)
	}
	if _, err := m.projectKube(t, bystander).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("a project of another organization was touched: %v", err)
	}

	// The names are free again and start empty.
	m.mustKubectl(t, hierarchyYAML(org), "apply", "-f", "-")
	m.mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=60s", "organization/"+org, "project/"+org+"-web")
	if cms, err := m.kube(t).CoreV1().ConfigMaps(orgNS).List(ctx, metav1.ListOptions{}); err != nil || len(ownConfigMaps(cms.Items)) != 0 {
		t.Fatalf("the re-created organization's namespace holds %v %v", cms, err)
	}
	if cms, err := m.projectKube(t, org+"-web").CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); err != nil || len(ownConfigMaps(cms.Items)) != 0 {
		t.Fatalf("the re-created project holds %v %v", cms, err)
	}
}

func TestFolderDeletionCascadesToItsSubtreeOnly(t *testing.T) {
	m := shared
	org := fmt.Sprintf("fold-%d", projectSeq.Add(1))
	m.mustKubectl(t, hierarchyYAML(org), "apply", "-f", "-")
	m.mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=60s", "project/"+org+"-web", "project/"+org+"-api")

	m.mustKubectl(t, "", "delete", "folder", org+"-team", "--timeout=60s")
	for _, obj := range []string{"folder/" + org + "-sub", "project/" + org + "-web"} {
		if r := m.kubectl(t, "", "get", obj); r.err == nil || !strings.Contains(r.stderr, "NotFound") {
			t.Fatalf("%s survived its folder's deletion: %s %s", obj, r.stdout, r.stderr)
		}
	}
	// The project directly under the organization stays.
	m.mustKubectl(t, "", "get", "project", org+"-api")
	m.mustKubectl(t, "", "delete", "organization", org, "--timeout=60s")
}

// The platform's aggregated roles get their rules from the controllers, as in a
// cluster with kube-controller-manager, so binding "view" works.
func TestAggregatedClusterRolesGetTheirRules(t *testing.T) {
	eventually(t, "view holds the rules aggregated into it", func() error {
		view, err := shared.kube(t).RbacV1().ClusterRoles().Get(context.Background(), "view", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, r := range view.Rules {
			if slices.Contains(r.Resources, "configmaps") && slices.Contains(r.Verbs, "list") {
				return nil
			}
		}
		return fmt.Errorf("view rules: %v", view.Rules)
	})
}

func TestOnlyTheServerRemovesThePurgeFinalizer(t *testing.T) {
	m := shared
	name := m.newProject(t, "purge-guard")
	_, err := m.dynamic(t).Resource(projectsGVR).Patch(context.Background(), name, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":["resourcemanager.miloapis.com/project-cleanup"]}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "project-purge") {
		t.Fatalf("removing the purge finalizer as a superuser: %v", err)
	}
}

// controllerManager is one running `milo controller-manager` process.
type controllerManager struct {
	cmd    *exec.Cmd
	logs   *framework.SyncBuffer
	exited chan struct{}
}

func startControllerManager(t *testing.T, kubeconfig string, extraArgs ...string) *controllerManager {
	t.Helper()
	cmd := exec.Command(miloBin, append([]string{"controller-manager", "--kubeconfig", kubeconfig,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=250ms",
		"--health-address=127.0.0.1:0"}, extraArgs...)...)
	cm := &controllerManager{cmd: cmd, logs: &framework.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = cm.logs, cm.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		cmd.Wait() //nolint:errcheck
		close(cm.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		select {
		case <-cm.exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill() //nolint:errcheck
			t.Errorf("controller manager did not stop on SIGTERM\n%s", cm.logs.String())
		}
	})
	return cm
}

func (cm *controllerManager) leading() bool { return strings.Contains(cm.logs.String(), "Leading") }

// healthAddress is where the controller manager serves /healthz, /readyz and /metrics.
func (cm *controllerManager) healthAddress(t *testing.T) string {
	t.Helper()
	var addr string
	eventually(t, "the controller manager's health address", func() error {
		m := regexp.MustCompile(`"Serving health and metrics" address="([^"]+)"`).FindStringSubmatch(cm.logs.String())
		if m == nil {
			return fmt.Errorf("not logged yet")
		}
		addr = m[1]
		return nil
	})
	return addr
}

// TestTwoControllerManagersAndTheInitializationGate runs a server without
// in-process controllers: a new project is closed to users until a controller
// manager bootstraps it; two controller managers share the work by electing one
// leader, and the other takes over when the leader stops.
func TestTwoControllerManagersAndTheInitializationGate(t *testing.T) {
	dataDir := t.TempDir()
	tokens := filepath.Join(dataDir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(tokenFile), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := startMilo(dataDir, "--controllers=false", "--token-auth-file", tokens)
	if err != nil {
		t.Fatal(err)
	}
	m.stopOnCleanup(t)
	ctx := context.Background()
	if err := m.ensureOrganization("acme"); err != nil {
		t.Fatal(err)
	}
	// alice may read every project's configmaps. (Not through the aggregated
	// "view", which gets its rules only once a controller manager runs.)
	if _, err := m.kube(t).RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.kube(t).RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "configmap-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "alice"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Created by server-side apply, which stores no bootstrap with the
	// Project (a create does, and is Ready at once): the controllers
	// bootstrap it, and until they do it is initializing.
	if _, err := m.dynamic(t).Resource(projectsGVR).Apply(ctx, "first", &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": map[string]any{"name": "first"},
		"spec": map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": "acme"}},
	}}, metav1.ApplyOptions{FieldManager: "e2e"}); err != nil {
		t.Fatal(err)
	}
	aliceGet := func(project string) *http.Response {
		t.Helper()
		cfg := rest.AnonymousClientConfig(m.configAt(t, ""))
		cfg.BearerToken = "alice-token"
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(cfg.Host + tenancy.ProjectPath(project) + "/api/v1/namespaces/default/configmaps")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	// No controller runs yet: the project stays initializing, and says so (once
	// alice's binding has reached the authorizer's cache).
	eventually(t, "an initializing project answers 503 with Retry-After", func() error {
		if resp := aliceGet("first"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			return fmt.Errorf("status %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		return nil
	})

	a := startControllerManager(t, m.Kubeconfig)
	b := startControllerManager(t, m.Kubeconfig)
	m.waitProjectReady(t, "first")
	// Both serve their health and the leader's work queues show in its metrics.
	for _, cm := range []*controllerManager{a, b} {
		base := "http://" + cm.healthAddress(t)
		for _, path := range []string{"/healthz", "/readyz"} {
			resp, err := http.Get(base + path)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s%s: %v %v", base, path, resp, err)
			}
			resp.Body.Close()
		}
	}
	eventually(t, "work queue metrics", func() error {
		for _, cm := range []*controllerManager{a, b} {
			resp, err := http.Get("http://" + cm.healthAddress(t) + "/metrics")
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `workqueue_adds_total{name="projects"}`) {
				return nil
			}
		}
		return fmt.Errorf("no workqueue_adds_total for projects")
	})
	if resp := aliceGet("first"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a user's request to a ready project: %d", resp.StatusCode)
	}
	var leader, follower *controllerManager
	eventually(t, "one controller manager leads", func() error {
		switch {
		case a.leading() && b.leading():
			return fmt.Errorf("both lead:\n%s\n%s", a.logs.String(), b.logs.String())
		case a.leading():
			leader, follower = a, b
		case b.leading():
			leader, follower = b, a
		default:
			return fmt.Errorf("none leads yet")
		}
		return nil
	})
	lease, err := m.kube(t).CoordinationV1().Leases("milo-system").Get(ctx, "milo-controller-manager", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("lease: %v %v", lease, err)
	}
	if follower.leading() {
		t.Fatalf("the follower leads too")
	}

	// The leader stops; the other takes over and keeps the hierarchy working.
	leader.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	<-leader.exited
	eventually(t, "the other controller manager takes over", func() error {
		if !follower.leading() {
			return fmt.Errorf("not leading yet")
		}
		return nil
	})
	m.createProject(t, "second")
	m.waitProjectReady(t, "second")
	// The new leader runs every controller: a namespace deleted in a project goes.
	sc := m.projectKube(t, "second")
	createNamespace(t, sc, "team")
	createConfigMap(t, sc, "team", "content", nil, nil)
	if err := sc.CoreV1().Namespaces().Delete(ctx, "team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the namespace deleted by the new leader", func() error {
		if _, err := sc.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	createConfigMap(t, m.projectKube(t, "first"), "default", "data", nil, nil)
	m.mustKubectl(t, "", "delete", "project", "first", "--timeout=60s")
	m.createProject(t, "first")
	m.waitProjectReady(t, "first")
	if cms, err := m.projectKube(t, "first").CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); err != nil || len(ownConfigMaps(cms.Items)) != 0 {
		t.Fatalf("the re-created project holds %v %v", cms, err)
	}
}
