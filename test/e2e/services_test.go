package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mccontroller "sigs.k8s.io/multicluster-runtime/pkg/controller"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	widgetsv1alpha1 "go.miloapis.com/milo/examples/widgets/api/v1alpha1"
	"go.miloapis.com/milo/examples/widgets/controller"
	"go.miloapis.com/milo/pkg/mcprovider"
	"go.miloapis.com/milo/test/framework"
)

// widgetsService is the sample service's controller, run in the test process
// against a Milo server as its own binary would be.
type widgetsService struct {
	provider *mcprovider.Provider
	stop     context.CancelFunc
	done     chan error
}

// startWidgets starts the service: with sources, its controller watches
// through the provider's Sources and projects are not engaged; without, it
// watches with the builder's For and Owns, once per engaged project.
func startWidgets(t *testing.T, cfg *rest.Config, sources bool) *widgetsService {
	t.Helper()
	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	provider, err := mcprovider.New(cfg, mcprovider.Options{Scheme: scheme, DoNotEngage: sources})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := mcmanager.New(cfg, provider, manager.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	// A restarted service is a second controller of the same name in this
	// process, which controller-runtime refuses unless told.
	r := &controller.Reconciler{Options: mccontroller.Options{SkipNameValidation: ptr.To(true)}}
	if sources {
		r.Sources = provider
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &widgetsService{provider: provider, stop: cancel, done: make(chan error, 1)}
	go func() { s.done <- mgr.Start(ctx) }()
	t.Cleanup(s.shutdown)
	return s
}

func (s *widgetsService) shutdown() {
	if s.stop != nil {
		s.stop()
		<-s.done
		s.stop = nil
	}
}

// widgetIn returns the client of a project (its own URL), for checking what
// the service did there.
func widgetClient(t *testing.T, m *milo, project string) client.Client {
	t.Helper()
	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(m.projectConfig(t, project), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newWidget(name, message string) *widgetsv1alpha1.Widget {
	return &widgetsv1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: widgetsv1alpha1.WidgetSpec{Message: message, Size: 3}}
}

// waitReconciled waits for the widget's ConfigMap (owned by it, holding its
// message) and its Ready condition, in its project.
func waitReconciled(t *testing.T, c client.Client, name, message string) {
	t.Helper()
	eventually(t, "widget "+name+" reconciled", func() error {
		w := &widgetsv1alpha1.Widget{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, w); err != nil {
			return err
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: controller.ConfigMapName(name)}, cm); err != nil {
			return err
		}
		if cm.Data["message"] != message {
			return fmt.Errorf("ConfigMap holds %q, want %q", cm.Data["message"], message)
		}
		if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != w.UID {
			return fmt.Errorf("ConfigMap owners %v, want the widget %s", cm.OwnerReferences, w.UID)
		}
		if w.Status.ObservedGeneration != w.Generation || !meta.IsStatusConditionTrue(w.Status.Conditions, widgetsv1alpha1.ConditionReady) {
			return fmt.Errorf("status %+v", w.Status)
		}
		return nil
	})
}

// A service built on the multicluster-runtime provider reconciles each
// project's objects in that project only: two projects' widgets of the same
// name are reconciled apart; a deleted project is disengaged and the service
// stops acting there; a restarted service resumes. Both ways of watching:
// the builder's watches on engaged projects, and the provider's Sources.
func TestServiceReconcilesEachProjectApart(t *testing.T) {
	m := shared
	m.mustKubectl(t, "", "apply", "-f", "../../examples/widgets/config/crd", "-f", "../../examples/widgets/config/protectedresource.yaml")
	m.waitEstablished(t, "crd/widgets.widgets.samples.miloapis.example")
	t.Run("engaged", func(t *testing.T) { testServiceReconcilesEachProjectApart(t, m, false) })
	t.Run("sources", func(t *testing.T) { testServiceReconcilesEachProjectApart(t, m, true) })
}

func testServiceReconcilesEachProjectApart(t *testing.T, m *milo, sources bool) {
	ctx := context.Background()
	a, b := m.newProject(t, "widgets-a"), m.newProject(t, "widgets-b")
	ca, cb := widgetClient(t, m, a), widgetClient(t, m, b)

	s := startWidgets(t, m.restConfig(t), sources)
	for _, c := range []struct {
		cl      client.Client
		message string
	}{{ca, "from a"}, {cb, "from b"}} {
		if err := c.cl.Create(ctx, newWidget("w", c.message)); err != nil {
			t.Fatal(err)
		}
	}
	waitReconciled(t, ca, "w", "from a")
	waitReconciled(t, cb, "w", "from b")

	// A change in A is reconciled in A; B's widget of the same name is not touched.
	w := &widgetsv1alpha1.Widget{}
	if err := ca.Get(ctx, client.ObjectKey{Namespace: "default", Name: "w"}, w); err != nil {
		t.Fatal(err)
	}
	w.Spec.Message = "changed in a"
	if err := ca.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, ca, "w", "changed in a")
	waitReconciled(t, cb, "w", "from b")

	// A project's cluster reads and writes its own project only.
	if err := cb.Create(ctx, newWidget("only-b", "b's")); err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, cb, "only-b", "b's")
	clusterA, err := s.provider.Get(ctx, multicluster.ClusterName(a))
	if err != nil {
		t.Fatalf("project %s is not engaged: %v", a, err)
	}
	viewA := clusterA.GetClient()
	if err := viewA.Get(ctx, client.ObjectKey{Namespace: "default", Name: "only-b"}, &widgetsv1alpha1.Widget{}); !apierrors.IsNotFound(err) {
		t.Errorf("project %s's cluster reads project %s's widget: %v", a, b, err)
	}
	for _, r := range []client.Reader{viewA, clusterA.GetAPIReader()} {
		list := &widgetsv1alpha1.WidgetList{}
		if err := r.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Name != "w" || list.Items[0].Spec.Message != "changed in a" || list.Items[0].Namespace != "default" {
			t.Errorf("project %s's cluster lists %+v, want its own widget w only", a, list.Items)
		}
	}
	// A List in one namespace reads the project's objects only, of a kind
	// the service watches and of one it never did (every project has a
	// ServiceAccount default/default).
	nsWidgets := &widgetsv1alpha1.WidgetList{}
	if err := viewA.List(ctx, nsWidgets, client.InNamespace("default")); err != nil || len(nsWidgets.Items) != 1 || nsWidgets.Items[0].Name != "w" {
		t.Errorf("project %s's cluster lists in default: %v %+v, want its own widget w only", a, err, nsWidgets.Items)
	}
	accounts := &corev1.ServiceAccountList{}
	if err := viewA.List(ctx, accounts, client.InNamespace("default")); err != nil || len(accounts.Items) != 1 || accounts.Items[0].Name != "default" {
		t.Errorf("project %s's cluster lists ServiceAccounts in default: %v %+v, want its own default only", a, err, accounts.Items)
	}
	if err := viewA.Delete(ctx, newWidget("only-b", "")); !apierrors.IsNotFound(err) {
		t.Errorf("project %s's cluster deleting project %s's widget: %v", a, b, err)
	}
	if err := cb.Get(ctx, client.ObjectKey{Namespace: "default", Name: "only-b"}, &widgetsv1alpha1.Widget{}); err != nil {
		t.Errorf("project %s's widget after project %s's cluster deleted that name: %v", b, a, err)
	}

	// A deleted project is disengaged; a project created again under its
	// name is engaged as another project, which starts empty.
	clusterB, err := s.provider.Get(ctx, multicluster.ClusterName(b))
	if err != nil {
		t.Fatalf("project %s is not engaged: %v", b, err)
	}
	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, b, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "project "+b+" disengaged and gone", func() error {
		if _, err := s.provider.Get(ctx, multicluster.ClusterName(b)); !errors.Is(err, multicluster.ErrClusterNotFound) {
			return fmt.Errorf("still engaged (%v)", err)
		}
		if _, err := m.dynamic(t).Resource(projectsGVR).Get(ctx, b, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	m.createProject(t, b)
	m.waitProjectReady(t, b)
	eventually(t, "project "+b+" engaged again", func() error {
		_, err := s.provider.Get(ctx, multicluster.ClusterName(b))
		return err
	})
	// The old project's cluster writes nowhere: its storage id is not the new project's.
	if err := clusterB.GetClient().Create(ctx, newWidget("stale", "from the old project's cluster")); !apierrors.IsNotFound(err) {
		t.Errorf("a write through the deleted project's cluster: %v, want 404", err)
	}
	if err := cb.Create(ctx, newWidget("w", "new b")); err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, cb, "w", "new b")
	list := &widgetsv1alpha1.WidgetList{}
	if err := cb.List(ctx, list); err != nil || len(list.Items) != 1 {
		t.Errorf("the new project %s holds %v %v, want its one widget", b, err, list.Items)
	}

	// A restarted service resumes: what changed while it was down is reconciled.
	s.shutdown()
	if err := ca.Create(ctx, newWidget("w2", "while down")); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := ca.Get(ctx, client.ObjectKey{Namespace: "default", Name: controller.ConfigMapName("w2")}, cm); !apierrors.IsNotFound(err) {
		t.Fatalf("w2's ConfigMap before the service restarted: %v", err)
	}
	s = startWidgets(t, m.restConfig(t), sources)
	waitReconciled(t, ca, "w2", "while down")
	waitReconciled(t, ca, "w", "changed in a")
	// The restarted service's cache holds every project's objects of the
	// same namespace and name (its first list must not fold them into one).
	for _, p := range []string{a, b} {
		eventually(t, "project "+p+"'s kube-root-ca.crt in the service's cache", func() error {
			cl, err := s.provider.Get(ctx, multicluster.ClusterName(p))
			if err != nil {
				return err
			}
			return cl.GetClient().Get(ctx, client.ObjectKey{Namespace: "default", Name: "kube-root-ca.crt"}, &corev1.ConfigMap{})
		})
	}
}

// The sample service as its own binary, the way a provider runs it against
// `milo start`: it reconciles a Widget in a project and exits 0 on SIGTERM.
func TestWidgetsBinary(t *testing.T) {
	m := shared
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "widgets")
	build := exec.Command("go", "build", "-o", bin, "./examples/widgets/cmd/widgets")
	build.Dir = framework.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the sample service: %v\n%s", err, out)
	}
	m.mustKubectl(t, "", "apply", "-f", "../../examples/widgets/config/crd", "-f", "../../examples/widgets/config/protectedresource.yaml")
	m.waitEstablished(t, "crd/widgets.widgets.samples.miloapis.example")
	// The Roles the sample offers grant what its ProtectedResource
	// registers, once IAM has read it.
	eventually(t, "the sample's Roles apply", func() error {
		if r := m.kubectl(t, "", "apply", "-f", "../../examples/widgets/config/roles.yaml"); r.err != nil {
			return fmt.Errorf("%v: %s", r.err, r.stderr)
		}
		return nil
	})
	p := m.newProject(t, "widgets-bin")
	var log bytes.Buffer
	cmd := exec.Command(bin, "--kubeconfig", m.Kubeconfig, "--metrics-bind-address", "0")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	c := widgetClient(t, m, p)
	if err := c.Create(ctx, newWidget("from-the-binary", "hello")); err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, c, "from-the-binary", "hello")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("the sample service exited with %v\n%s", err, log.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the sample service did not stop on SIGTERM\n%s", log.String())
	}
}
