package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"go.miloapis.com/milo/pkg/tenancy"
)

// The service measurement (--service): the sample service of examples/widgets
// (bench/service) runs beside Milo from the first step on, each project gets
// one Widget, and at each step the harness reads the service's heap and
// goroutines and times Widgets from create to Ready.

var widgetsGVR = schema.GroupVersionResource{Group: "widgets.samples.miloapis.example", Version: "v1alpha1", Resource: "widgets"}

// sampleSeq numbers the timed Widgets of the whole run.
var sampleSeq atomic.Int64

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// serviceStep is the service's measurement at one step.
type serviceStep struct {
	Projects              int
	HeapBytes, Goroutines float64
	// HeapLiveBytes is the heap allocated right after a forced GC: what is
	// live, without the free space of spans in use that HeapBytes counts.
	HeapLiveBytes float64
	Ready         quantiles
	// Create, ToConfigMap and ToReady split Ready: the create's answer,
	// from it to the Widget's ConfigMap seen, from that to Ready seen.
	Create, ToConfigMap, ToReady quantiles
	// Raced counts samples whose Ready was seen before their ConfigMap:
	// their whole time after the create is in ToConfigMap.
	Raced int `json:",omitempty"`
	// Etcd is what stalled the embedded etcd's writes while the samples
	// were timed (nil: not read).
	Etcd                  *etcdStalls `json:",omitempty"`
	WidgetsPerSecond      float64
	ReadyWaitSeconds      float64
	Engaged, ReadyWidgets int
	Provider              string
	// ServerCollections is how many garbage collections the server ran
	// while the samples were timed, over SamplingSeconds: at 100,000
	// projects a collection's marking slows every request it overlaps. -1:
	// the server's metrics could not be read.
	ServerCollections, SamplingSeconds float64
	ObjectsPerProjectBytes             float64 `json:",omitempty"`
}

// serviceProcess is the service running for the harness.
type serviceProcess struct {
	cmd    *exec.Cmd
	exited chan error
	log    *os.File
	// pprof and metrics are the bases of its endpoints.
	pprof, metrics string
	http           *http.Client
	stopped        bool
}

// startService installs the Widget CRD on the platform and starts the service.
func startService(ctx context.Context, s *system, bin, provider, repo string) (*serviceProcess, error) {
	data, err := os.ReadFile(filepath.Join(repo, "examples/widgets/config/crd/widgets.samples.miloapis.example_widgets.yaml"))
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		return nil, err
	}
	ext, err := apiextensionsclient.NewForConfigAndClient(s.config, s.http)
	if err != nil {
		return nil, err
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return nil, fmt.Errorf("the Widget CRD is not established: %w", err)
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	p := &serviceProcess{exited: make(chan error, 1), http: &http.Client{Timeout: 2 * time.Minute},
		pprof: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), metrics: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	if p.log, err = os.OpenFile(filepath.Join(filepath.Dir(s.dataDir), "service-"+provider+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, "--kubeconfig", filepath.Join(s.dataDir, "admin.kubeconfig"), "--provider", provider,
		"--pprof-address", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--metrics-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--health-address", fmt.Sprintf("127.0.0.1:%d", ports[2]))
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.exited <- p.cmd.Wait() }()
	health := fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[2])
	started := false
	defer func() {
		if !started {
			p.stop() // a service that never became healthy is not left running
		}
	}()
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		select {
		case err := <-p.exited:
			p.exited <- err
			return false, fmt.Errorf("the service exited: %v (see %s)", err, p.log.Name())
		default:
		}
		resp, err := p.http.Get(health)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return nil, err
	}
	started = true
	return p, nil
}

// stop ends the service; stopping it again does nothing.
func (p *serviceProcess) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.log.Close()
}

// measureNaive starts the sample service on the naive provider beside the n
// projects (each with its Widget, Ready), waits until it has engaged every
// project, times Widgets from create to Ready and reads its footprint, then
// stops it. ReadyWaitSeconds is the time to engage the n projects.
func measureNaive(ctx context.Context, s *system, o options, n int, profile string) (serviceStep, error) {
	began := time.Now()
	p, err := startService(ctx, s, o.ServiceBin, "naive", o.Repo)
	if err != nil {
		return serviceStep{}, err
	}
	defer p.stop()
	engaged := 0
	if err := poll(ctx, 30*time.Minute, func() (bool, error) {
		body, err := getURL(ctx, p.http, p.metrics+"/metrics")
		if err != nil {
			return false, nil
		}
		engaged = int(parseMetrics(string(body)).sum("bench_service_engaged_projects"))
		return engaged >= n, nil
	}); err != nil {
		return serviceStep{}, fmt.Errorf("%d of %d projects engaged: %w", engaged, n, err)
	}
	wait := time.Since(began).Seconds()
	st, err := measureService(ctx, s, p, n, n, o.ServiceSamples, o.Workers*2, profile, 0)
	st.Provider, st.Engaged, st.ReadyWaitSeconds, st.WidgetsPerSecond = "naive", engaged, wait, 0
	return st, err
}

// footprint forces a GC in the service and reads its heap and goroutines.
func (p *serviceProcess) footprint(ctx context.Context, profile string) (heap, live, goroutines float64, err error) {
	prof, err := getURL(ctx, p.http, p.pprof+"/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, 0, 0, err
	}
	if profile != "" {
		if err := os.WriteFile(profile, prof, 0o644); err != nil {
			return 0, 0, 0, err
		}
	}
	body, err := getURL(ctx, p.http, p.metrics+"/metrics")
	if err != nil {
		return 0, 0, 0, err
	}
	m := parseMetrics(string(body))
	return m.sum("go_memstats_heap_inuse_bytes"), m.sum("go_memstats_heap_alloc_bytes"), m.sum("go_goroutines"), nil
}

// widget is the one Widget of a project (name "bench"), or a timed sample.
func widget(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "widgets.samples.miloapis.example/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     map[string]any{"message": "hello from the benchmark", "size": int64(3)}}}
}

func ownedBy(u *unstructured.Unstructured, uid types.UID) bool {
	for _, ref := range u.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

func isReady(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// measureService gives projects [from, n) their Widget, waits until every
// Widget is Ready, times samples more from create to Ready, and reads the
// service's footprint.
func measureService(ctx context.Context, s *system, p *serviceProcess, from, n, samples, workers int, profile string, sampleProfile time.Duration) (serviceStep, error) {
	r := serviceStep{Projects: n}
	projectDyn := func(project string) (dynamic.Interface, error) {
		return dynamic.NewForConfigAndClient(s.projectConfig(project), s.http)
	}
	began := time.Now()
	if err := parallel(ctx, "widgets created", from, n, workers, func(i int) error {
		dyn, err := projectDyn(projectName(i))
		if err != nil {
			return err
		}
		_, err = dyn.Resource(widgetsGVR).Namespace("default").Create(ctx, widget("bench"), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	}); err != nil {
		return r, err
	}
	// Every project's Widget Ready, read from the all-projects view. The
	// wait allows 20 a second at least: the service reconciled 40 a second
	// at 100,000 projects on two slow cores, which took 38 minutes.
	readyWithin := max(30*time.Minute, time.Duration(n-from)*50*time.Millisecond)
	all := rest.CopyConfig(s.config)
	all.Host = strings.TrimSuffix(all.Host, "/") + tenancy.AllProjectsPath
	allDyn, err := dynamic.NewForConfigAndClient(all, s.http)
	if err != nil {
		return r, err
	}
	if err := poll(ctx, readyWithin, func() (bool, error) {
		ready, cont := 0, ""
		for {
			list, err := allDyn.Resource(widgetsGVR).List(ctx, metav1.ListOptions{Limit: 5000, Continue: cont})
			if err != nil {
				return false, err
			}
			for i := range list.Items {
				if list.Items[i].GetName() == "bench" && isReady(&list.Items[i]) {
					ready++
				}
			}
			if cont = list.GetContinue(); cont == "" {
				break
			}
		}
		r.ReadyWidgets = ready
		progress("  widgets Ready: %d/%d", ready, n)
		return ready >= n, nil
	}); err != nil {
		return r, fmt.Errorf("widgets not Ready: %w", err)
	}
	r.ReadyWaitSeconds = time.Since(began).Seconds()
	r.WidgetsPerSecond = float64(n-from) / r.ReadyWaitSeconds
	// Samples are timed on a service with nothing else to do: the echoes
	// of the step's reconciles (each Widget's status write, its ConfigMap's
	// create) are still queued when the last Widget is Ready, and a sample
	// would wait behind them.
	var told time.Time
	if err := poll(ctx, 30*time.Minute, func() (bool, error) {
		body, err := getURL(ctx, p.http, p.metrics+"/metrics")
		if err != nil {
			return false, nil
		}
		depth := parseMetrics(string(body)).sum("workqueue_depth")
		if depth > 0 && time.Since(told) > 5*time.Second {
			progress("  service's work queue: %.0f", depth)
			told = time.Now()
		}
		return depth == 0, nil
	}); err != nil {
		return r, fmt.Errorf("the service's work queue did not drain: %w", err)
	}
	// And so are the server's and the controllers' queues: the step's
	// Widgets and ConfigMaps (the garbage collector's graph takes each
	// owner reference) would otherwise take the cores from the samples.
	if _, _, err := s.waitDrained(ctx, 10*time.Minute); err != nil {
		if ctx.Err() != nil {
			return r, err
		}
		progress("  work queues not read (%v): timing anyway", err)
	}
	// Timed samples, one at a time, spread over the projects. Each is
	// split where the harness can see it: the create's answer, the
	// Widget's ConfigMap appearing (the service saw the Widget and acted),
	// and the Widget's Ready status (the service's status write).
	var lat, created, toConfigMap, toReady latencies
	type slow struct {
		project                         string
		total, create, configMap, ready time.Duration
	}
	var slowest []slow
	etcdBefore, err := s.etcdMetrics(ctx)
	if err != nil {
		progress("  the embedded etcd's metrics (%v): its stalls not counted", err)
	}
	gcBefore, sampled := s.collections(ctx), time.Now()
	var profiles sync.WaitGroup
	defer profiles.Wait()
	if sampleProfile > 0 {
		for _, kind := range []string{"profile", "allocs"} {
			profiles.Go(func() {
				s.profile(ctx, "/debug/pprof/"+kind, sampleProfile, fmt.Sprintf("service-sampled-%d.%s.pprof", n, map[string]string{"profile": "cpu", "allocs": "allocs"}[kind]))
			})
		}
	}
	for k := range samples {
		project := projectName(k * n / samples)
		dyn, err := projectDyn(project)
		if err != nil {
			return r, err
		}
		// A name no earlier sample had (the naive provider's included), so
		// that no ConfigMap still being collected is in its way.
		name := fmt.Sprintf("sample-%d", sampleSeq.Add(1))
		w, err := dyn.Resource(widgetsGVR).Namespace("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			return r, err
		}
		cw, err := dyn.Resource(configMapsGVR).Namespace("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name + "-widget"})
		if err != nil {
			w.Stop()
			return r, err
		}
		stop := func() { w.Stop(); cw.Stop() }
		start := time.Now()
		made, err := dyn.Resource(widgetsGVR).Namespace("default").Create(ctx, widget(name), metav1.CreateOptions{})
		if err != nil {
			stop()
			return r, err
		}
		answered := time.Now()
		var cmSeen time.Time
		cmEvents := cw.ResultChan()
		timeout := time.After(2 * time.Minute)
	wait:
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					stop()
					return r, fmt.Errorf("sample widget in %s: the watch ended", project)
				}
				if u, isU := ev.Object.(*unstructured.Unstructured); isU && isReady(u) {
					break wait
				}
			case ev, ok := <-cmEvents:
				if !ok {
					cmEvents = nil // the split is lost, the sample is not
				} else if u, isU := ev.Object.(*unstructured.Unstructured); isU && cmSeen.IsZero() && ownedBy(u, made.GetUID()) {
					// Not an earlier sample's ConfigMap not yet collected.
					cmSeen = time.Now()
				}
			case <-timeout:
				stop()
				return r, fmt.Errorf("sample widget in %s not Ready within 2 minutes", project)
			}
		}
		stop()
		ready := time.Now()
		if cmSeen.IsZero() { // Ready seen first: the two events raced
			cmSeen = ready
			r.Raced++
		}
		lat = append(lat, ready.Sub(start))
		created = append(created, answered.Sub(start))
		toConfigMap = append(toConfigMap, cmSeen.Sub(answered))
		toReady = append(toReady, ready.Sub(cmSeen))
		slowest = append(slowest, slow{project, ready.Sub(start), answered.Sub(start), cmSeen.Sub(answered), ready.Sub(cmSeen)})
		if err := dyn.Resource(widgetsGVR).Namespace("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return r, err
		}
	}
	slices.SortFunc(slowest, func(a, b slow) int { return int(b.total - a.total) })
	for _, sl := range slowest[:min(len(slowest), 6)] {
		progress("  slow sample in %s: %.1f ms = create %.1f + to ConfigMap %.1f + to Ready %.1f", sl.project,
			ms(sl.total), ms(sl.create), ms(sl.configMap), ms(sl.ready))
	}
	for _, l := range []latencies{created, toConfigMap, toReady} {
		slices.Sort(l)
	}
	r.Create = quantiles{P50: ms(created.quantile(0.5)), P99: ms(created.quantile(0.99))}
	r.ToConfigMap = quantiles{P50: ms(toConfigMap.quantile(0.5)), P99: ms(toConfigMap.quantile(0.99))}
	r.ToReady = quantiles{P50: ms(toReady.quantile(0.5)), P99: ms(toReady.quantile(0.99))}
	r.SamplingSeconds = time.Since(sampled).Seconds()
	if etcdBefore != nil {
		etcdAfter, err := s.etcdMetrics(ctx)
		if err != nil {
			progress("  the embedded etcd's metrics (%v): its stalls not counted", err)
		}
		r.Etcd = etcdStallsBetween(etcdBefore, etcdAfter)
	}
	// A failed read of the server's metrics gives no count (-1).
	if after := s.collections(ctx); gcBefore > 0 && after >= gcBefore {
		r.ServerCollections = after - gcBefore
	} else {
		r.ServerCollections = -1
	}
	slices.Sort(lat)
	r.Ready = quantiles{P50: ms(lat.quantile(0.5)), P99: ms(lat.quantile(0.99))}
	if r.HeapBytes, r.HeapLiveBytes, r.Goroutines, err = p.footprint(ctx, profile); err != nil {
		return r, err
	}
	return r, nil
}
