package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"go.miloapis.com/milo/pkg/kubeconfig"
	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

// otlpReceiver is an OTLP/gRPC trace receiver on loopback: what a collector
// would get from the server.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	// service names the process (service.name) each span came from.
	service map[*tracepb.Span]string
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.service == nil {
		r.service = map[*tracepb.Span]string{}
	}
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
			for _, s := range ss.GetSpans() {
				r.service[s] = service
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serviceOf is the service.name of the process that sent s.
func (r *otlpReceiver) serviceOf(s *tracepb.Span) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.service[s]
}

// find returns the spans match accepts.
func (r *otlpReceiver) find(match func(*tracepb.Span) bool) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

func spanAttributes(s *tracepb.Span) map[string]string {
	out := map[string]string{}
	for _, kv := range s.GetAttributes() {
		out[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return out
}

func startOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	go srv.Serve(lis) //nolint:errcheck
	t.Cleanup(srv.Stop)
	return r, lis.Addr().String()
}

// TestTelemetryNamesTenantsWithoutLabellingThem runs one server with tracing
// to a loopback OTLP receiver, JSON logs and a short top-projects window,
// and follows a project's life through its spans, metrics, Events and logs.
func TestTelemetryNamesTenantsWithoutLabellingThem(t *testing.T) {
	ctx := context.Background()
	receiver, endpoint := startOTLPReceiver(t)
	dir := t.TempDir()
	tracing := filepath.Join(dir, "tracing.yaml")
	if err := os.WriteFile(tracing, []byte(fmt.Sprintf("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: %s\nsamplingRatePerMillion: 1000000\n", endpoint)), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(tokenFile), 0o600); err != nil {
		t.Fatal(err)
	}
	policy, auditLog := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := startMilo(filepath.Join(dir, "data"), "--token-auth-file", tokens, "--tracing-config-file", tracing,
		"--audit-policy-file", policy, "--audit-log-path", auditLog, "--audit-projects=tel-p2", "--logging-format=json", "-v=3",
		"--top-projects=3", "--top-projects-window=2s", "--top-projects-count-interval=1s", "--controllers=false")
	if err != nil {
		t.Fatal(err)
	}
	m.stopOnCleanup(t)
	// The controllers run apart, tracing to the same receiver; the server
	// keeps the purger, whose reconciles are the server's spans.
	startControllerManager(t, m.Kubeconfig, "--tracing-config-file", tracing)
	for _, org := range []string{"tel-a", "tel-b"} {
		if err := m.ensureOrganization(org); err != nil {
			t.Fatal(err)
		}
	}
	project := func(name, org string) {
		t.Helper()
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": org}},
		}}
		if _, err := m.dynamic(t).Resource(projectsGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		m.waitProjectReady(t, name)
	}
	project("tel-p1", "tel-a")
	project("tel-p2", "tel-b")

	t.Run("a project request's span carries its tenant and continues the caller's trace", func(t *testing.T) {
		traceID, parentID := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		cfg := m.projectConfig(t, "tel-p1")
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				req = req.Clone(req.Context())
				req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
				return rt.RoundTrip(req)
			})
		}
		if _, err := kubeFor(t, cfg).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		var request *tracepb.Span
		eventually(t, "the request's span reaches the receiver", func() error {
			spans := receiver.find(func(s *tracepb.Span) bool {
				return hex.EncodeToString(s.GetTraceId()) == traceID && hex.EncodeToString(s.GetParentSpanId()) == parentID
			})
			if len(spans) == 0 {
				return fmt.Errorf("no span of trace %s with parent %s", traceID, parentID)
			}
			request = spans[0]
			return nil
		})
		attrs := spanAttributes(request)
		for k, v := range map[string]string{"milo.view": "project", "milo.project": "tel-p1", "milo.organization": "tel-a"} {
			if attrs[k] != v {
				t.Errorf("request span %q: %s=%q, want %q (all: %v)", request.GetName(), k, attrs[k], v, attrs)
			}
		}
		if attrs["user.name"] == "" {
			t.Errorf("request span has no user: %v", attrs)
		}
		eventually(t, "a child span of the request", func() error {
			if len(receiver.find(func(s *tracepb.Span) bool { return string(s.GetParentSpanId()) == string(request.GetSpanId()) })) == 0 {
				return fmt.Errorf("no span below %q", request.GetName())
			}
			return nil
		})
		// Children are not annotated again: the tenant is on the request's span.
		for _, s := range receiver.find(func(s *tracepb.Span) bool { return string(s.GetParentSpanId()) == string(request.GetSpanId()) }) {
			if _, ok := spanAttributes(s)["milo.project"]; ok {
				t.Errorf("child span %q repeats the tenant", s.GetName())
			}
		}
	})

	t.Run("a project's Events are read in its organization's context only", func(t *testing.T) {
		// A project is created Ready, with no Event; moved into a folder,
		// it is made Ready again by the controllers, which say so.
		if _, err := m.dynamic(t).Resource(foldersGVR).Create(ctx, folder("tel-fa", "Organization", "tel-a"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.dynamic(t).Resource(projectsGVR).Patch(ctx, "tel-p1", types.MergePatchType,
			[]byte(`{"spec":{"ownerRef":{"kind":"Folder","name":"tel-fa"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		aEvents := kubeFor(t, m.configAt(t, tenancy.OrganizationPath("tel-a"))).CoreV1().Events("")
		eventually(t, "ControlPlaneReady of tel-p1 in tel-a's context", func() error {
			list, err := aEvents.List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, e := range list.Items {
				if e.InvolvedObject.Kind == "Project" && e.InvolvedObject.Name == "tel-p1" && e.Reason == "ControlPlaneReady" {
					return nil
				}
			}
			return fmt.Errorf("%d events, none ControlPlaneReady for tel-p1", len(list.Items))
		})
		out := m.kubectlWith(t, m.orgKubeconfig(t, "tel-a"), "", "events")
		if out.err != nil || !strings.Contains(out.stdout, "ControlPlaneReady") || !strings.Contains(out.stdout, "Project/tel-p1") {
			t.Errorf("kubectl events in tel-a's context: %v\n%s%s", out.err, out.stdout, out.stderr)
		}
		for path, who := range map[string]string{tenancy.OrganizationPath("tel-b"): "tel-b's context", tenancy.ProjectPath("tel-p1"): "the project itself", tenancy.ProjectPath("tel-p2"): "another project"} {
			list, err := kubeFor(t, m.configAt(t, path)).CoreV1().Events("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("events in %s: %v", who, err)
			}
			for _, e := range list.Items {
				if e.InvolvedObject.Name == "tel-p1" {
					t.Errorf("%s sees an Event about tel-p1: %s %s", who, e.Reason, e.Message)
				}
			}
		}
	})

	// A project is created Ready, with nothing for the controllers to do
	// (they neither sync nor trace it); moved into a folder above, it was
	// made Ready again by them.
	t.Run("controllers trace each reconcile with its project", func(t *testing.T) {
		eventually(t, "a reconcile span of tel-p1 from the controller manager", func() error {
			for _, s := range receiver.find(func(s *tracepb.Span) bool {
				a := spanAttributes(s)
				return s.GetName() == "projects reconcile" && a["milo.project"] == "tel-p1" && a["milo.organization"] == "tel-a"
			}) {
				if service := receiver.serviceOf(s); service != "milo-controller-manager" {
					return fmt.Errorf("a 'projects reconcile' span from %q", service)
				}
				return nil
			}
			return fmt.Errorf("no 'projects reconcile' span for tel-p1")
		})
	})

	t.Run("a stuck namespace deletion is an Event in its project only", func(t *testing.T) {
		p1, p2 := m.projectKube(t, "tel-p1"), m.projectKube(t, "tel-p2")
		createNamespace(t, p1, "stuck")
		createNamespace(t, p2, "stuck")
		if _, err := p1.CoreV1().ConfigMaps("stuck").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := p1.CoreV1().Namespaces().Delete(ctx, "stuck", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "SomeResourcesRemain in tel-p1", func() error {
			list, err := p1.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, e := range list.Items {
				if e.InvolvedObject.Kind == "Namespace" && e.InvolvedObject.Name == "stuck" && e.Reason == "SomeResourcesRemain" {
					return nil
				}
			}
			return fmt.Errorf("%d events in default, none SomeResourcesRemain", len(list.Items))
		})
		list, err := p2.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Namespace" {
				t.Errorf("tel-p2 sees an Event about a namespace: %s %s", e.Reason, e.Message)
			}
		}
		held, err := p1.CoreV1().ConfigMaps("stuck").Get(ctx, "held", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held.Finalizers = nil
		if _, err := p1.CoreV1().ConfigMaps("stuck").Update(ctx, held, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the heaviest projects are reported, to the platform only", func(t *testing.T) {
		busy := m.projectKube(t, "tel-p2")
		eventually(t, "tel-p2 on top by requests and objects", func() error {
			for range 20 {
				if _, err := busy.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
					return err
				}
			}
			body, err := m.kube(t).Discovery().RESTClient().Get().AbsPath("/milo/top-projects").DoRaw(ctx)
			if err != nil {
				return err
			}
			var report struct {
				ByRequestRate, ByStoredObjects []struct {
					Project string
					Value   float64
				}
			}
			if err := json.Unmarshal(body, &report); err != nil {
				return err
			}
			if len(report.ByRequestRate) == 0 || report.ByRequestRate[0].Project != "tel-p2" || len(report.ByStoredObjects) == 0 {
				return fmt.Errorf("report %s", body)
			}
			return nil
		})
		out, err := exec.Command(miloBin, "top", "projects", "--kubeconfig", m.Kubeconfig).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "tel-p2") || !strings.Contains(string(out), "BY STORED OBJECTS") {
			t.Errorf("milo top projects: %v\n%s", err, out)
		}
		if _, err := m.projectKube(t, "tel-p1").Discovery().RESTClient().Get().AbsPath("/milo/top-projects").DoRaw(ctx); !apierrors.IsNotFound(err) {
			t.Errorf("/milo/top-projects in a project: %v, want 404", err)
		}
		if _, err := m.as(t, "", "").Discovery().RESTClient().Get().AbsPath("/milo/top-projects").DoRaw(ctx); err == nil {
			t.Errorf("an anonymous client read /milo/top-projects")
		}
	})

	// The project's deletion runs to the end: its Events, and the deletion
	// metrics the dashboard reads.
	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, "tel-p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Purged of tel-p1 in tel-a's context", func() error {
		list, err := kubeFor(t, m.configAt(t, tenancy.OrganizationPath("tel-a"))).CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Name == "tel-p1" && e.Reason == "Purged" {
				return nil
			}
		}
		return fmt.Errorf("no Purged event yet")
	})
	eventually(t, "the server's purge of tel-p1 traced", func() error {
		if len(receiver.find(func(s *tracepb.Span) bool {
			return s.GetName() == "project-purge reconcile" && spanAttributes(s)["milo.project"] == "tel-p1"
		})) == 0 {
			return fmt.Errorf("no 'project-purge reconcile' span for tel-p1")
		}
		return nil
	})
	// A path the router answers itself, and a request IAM decides.
	_, _ = m.projectKube(t, "tel-p2").Discovery().RESTClient().Get().AbsPath("/no-such-path").DoRaw(ctx)
	_, _ = m.as(t, "alice-token", tenancy.OrganizationPath("tel-a")).CoreV1().ConfigMaps(tenancy.OrganizationNamespace("tel-a")).List(ctx, metav1.ListOptions{})

	t.Run("metrics: Milo's own series, none labelled by a tenant", func(t *testing.T) {
		var metrics string
		eventually(t, "Milo's series", func() error {
			// The top projects are those with requests in the last window (2 s).
			if _, err := m.projectKube(t, "tel-p2").CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return err
			}
			body, err := m.kube(t).Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
			if err != nil {
				return err
			}
			metrics = string(body)
			for _, want := range []string{
				`milo_tenant_router_requests_total{outcome="served",view="project"}`,
				`milo_tenant_router_requests_total{outcome="not_found",view="project"}`,
				`milo_hierarchy_objects{kind="Project",phase="Ready"}`,
				`milo_hierarchy_deletion_duration_seconds_count{kind="Project",stage="purged"}`,
				`milo_project_purge_duration_seconds_count`,
				`milo_iam_index_entries{index="bindings"}`,
				`milo_iam_decision_duration_seconds`,
				`workqueue_depth{name="project-purge"}`,
				`milo_top_project_requests_per_second{`,
			} {
				if !strings.Contains(metrics, want) {
					return fmt.Errorf("no %s", want)
				}
			}
			return nil
		})
		sc := bufio.NewScanner(strings.NewReader(metrics))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "milo_top_project_") {
				continue
			}
			for _, p := range []string{"tel-p1", "tel-p2", "tel-a", "tel-b"} {
				if strings.Contains(line, `"`+p+`"`) {
					t.Errorf("a series names tenant %s: %s", p, line)
				}
			}
		}
		checkObservabilityFiles(t, metrics)
	})

	t.Run("the audit log records only the projects --audit-projects names", func(t *testing.T) {
		var lines []string
		eventually(t, "audit events of tel-p2", func() error {
			body, err := os.ReadFile(auditLog)
			if err != nil {
				return err
			}
			lines = strings.Split(strings.TrimSpace(string(body)), "\n")
			for _, l := range lines {
				if strings.Contains(l, `"tenancy.miloapis.com/project":"tel-p2"`) {
					return nil
				}
			}
			return fmt.Errorf("%d lines, none of tel-p2", len(lines))
		})
		for _, l := range lines {
			var e struct{ Annotations map[string]string }
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("audit line %q: %v", l, err)
			}
			if p := e.Annotations[tenancy.AuditProject]; p != "tel-p2" {
				t.Errorf("an audit event of %q was recorded: %.300s", p, l)
			}
		}
	})

	t.Run("JSON log lines of a project's requests name the project", func(t *testing.T) {
		eventually(t, "an access log line of tel-p2", func() error {
			sc := bufio.NewScanner(strings.NewReader(m.Logs.String()))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var line map[string]any
				if json.Unmarshal(sc.Bytes(), &line) != nil {
					continue
				}
				if line["msg"] == "HTTP" && line["project"] == "tel-p2" {
					return nil
				}
			}
			return fmt.Errorf("no JSON line with msg HTTP and project tel-p2")
		})
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// orgKubeconfig writes a kubeconfig of an organization's context, derived
// from the admin's as `milo kubeconfig` does.
func (m *milo) orgKubeconfig(t *testing.T, org string) string {
	t.Helper()
	return m.derivedKubeconfig(t, kubeconfig.Target{Organization: org}, org)
}

// checkObservabilityFiles checks that every metric the dashboard and the alert
// rules name is one the server exposes.
func checkObservabilityFiles(t *testing.T, exposed string) {
	t.Helper()
	names := map[string]bool{}
	for _, line := range strings.Split(exposed, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			if f[3] == "histogram" || f[3] == "summary" {
				for _, s := range []string{"_bucket", "_count", "_sum"} {
					names[f[2]+s] = true
				}
			}
		}
	}
	metric := regexp.MustCompile(`\b(milo|apiserver|etcd|workqueue|process|go|rest_client|apiserver_flowcontrol)_[a-z0-9_]+\b`)
	for _, file := range []string{"docs/observability/dashboard.json", "docs/observability/alerts.yaml"} {
		body, err := os.ReadFile(filepath.Join(framework.RepoRoot(), file))
		if err != nil {
			t.Fatal(err)
		}
		var missing []string
		for _, name := range metric.FindAllString(string(body), -1) {
			if !names[name] && !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s names metrics the server does not expose: %v", file, missing)
		}
	}
}
