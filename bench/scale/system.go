package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"go.miloapis.com/milo/pkg/tenancy"
)

// system is one server under test, run as a separate process on loopback.
type system struct {
	// name is "milo" or "baseline".
	name    string
	bin     string
	dataDir string
	port    int
	cmd     *exec.Cmd
	exited  chan error
	log     *os.File

	// config reaches the platform as an administrator; http is shared by every
	// client of the run. user is an ordinary identity (Milo only): requests to a
	// project that is not Ready yet answer it 503, so its writes wait for Ready.
	config   *rest.Config
	user     *rest.Config
	http     *http.Client
	userHTTP *http.Client

	// controllers is the controller process when the controllers run apart
	// from the server (Milo's `milo controller-manager`, the baseline's
	// kube-controller-manager), else nil. inProcess is true when the server
	// runs the controllers itself (Milo with --milo-controllers=in-process).
	controllers *controllerProcess
	separate    bool
	inProcess   bool
	// args are added to the server's flags at every start; extraArgs at
	// its next start.
	args, extraArgs []string
}

// hasControllers reports whether the system runs the controllers that delete
// namespaces and dependents.
func (s *system) hasControllers() bool { return s.separate || s.inProcess }

// controllerProcess is a controller manager run as its own process, whose
// /healthz, /metrics and /debug/pprof the harness reads over loopback.
type controllerProcess struct {
	cmd    *exec.Cmd
	exited chan error
	log    *os.File
	// url is the base of its endpoints: http://127.0.0.1:port for Milo,
	// https://127.0.0.1:port (a self-signed certificate) for kube-controller-manager.
	url  string
	http *http.Client
}

// benchUser is the ordinary identity of the harness in Milo (a static token,
// owner of organization bench through Milo IAM).
const (
	benchUser  = "bench-user"
	benchToken = "bench-user-token"
)

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func newSystem(name, bin, dir string, o options) (*system, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &system{name: name, bin: bin, dataDir: filepath.Join(dir, "data"), port: port}
	if s.isMilo() {
		s.args = o.MiloArgs
		s.separate = o.MiloControllers != "in-process"
		s.inProcess = !s.separate
	} else {
		s.separate = o.BaselineControllers
	}
	return s, nil
}

func (s *system) isMilo() bool { return s.name == "milo" }

// start runs the server and returns once /readyz answers ok, with the time that took.
func (s *system) start(ctx context.Context) (time.Duration, error) {
	args := []string{"--data-dir", s.dataDir, "--secure-port", strconv.Itoa(s.port)}
	if s.isMilo() {
		tokens := filepath.Join(filepath.Dir(s.dataDir), "tokens.csv")
		if err := os.WriteFile(tokens, []byte(benchToken+","+benchUser+","+benchUser+"\n"), 0o600); err != nil {
			return 0, err
		}
		args = append([]string{"start", "--token-auth-file", tokens}, args...)
		if s.separate {
			// The hierarchy controller stays in the server (kube-controller-manager
			// has no counterpart); the others run in the controller process.
			args = append(args, "--controllers=hierarchy")
		}
	}
	args = append(append(args, s.args...), s.extraArgs...)
	log, err := os.OpenFile(filepath.Join(filepath.Dir(s.dataDir), s.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	s.log = log
	began := time.Now()
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	s.cmd, s.exited = cmd, make(chan error, 1)
	go func() { s.exited <- cmd.Wait() }()
	if err := s.waitReady(ctx); err != nil {
		return 0, err
	}
	took := time.Since(began)
	if s.separate && s.controllers == nil {
		if err := s.startControllers(ctx); err != nil {
			return 0, err
		}
	}
	return took, nil
}

// startControllers runs the controller process against the server and
// returns once its /healthz answers ok. It keeps running across restarts of
// the server.
func (s *system) startControllers(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	c := &controllerProcess{exited: make(chan error, 1)}
	var args []string
	if s.isMilo() {
		args = []string{"controller-manager", "--kubeconfig", filepath.Join(s.dataDir, "admin.kubeconfig"),
			"--controllers=*,-hierarchy", "--leader-elect=false", "--health-address", fmt.Sprintf("127.0.0.1:%d", port), "--profiling"}
		c.url, c.http = fmt.Sprintf("http://127.0.0.1:%d", port), &http.Client{Timeout: 2 * time.Minute}
	} else {
		args = []string{"controller-manager", "--data-dir", s.dataDir, "--secure-port", strconv.Itoa(port)}
		// kube-controller-manager serves a self-signed certificate, on loopback.
		c.url = fmt.Sprintf("https://127.0.0.1:%d", port)
		c.http = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	}
	if c.log, err = os.OpenFile(filepath.Join(filepath.Dir(s.dataDir), s.name+"-controllers.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return err
	}
	c.cmd = exec.Command(s.bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		return err
	}
	go func() { c.exited <- c.cmd.Wait() }()
	s.controllers = c
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-c.exited:
			c.exited <- err
			return fmt.Errorf("%s controllers exited while starting: %v (see %s)", s.name, err, c.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if body, err := c.get(ctx, "/healthz"); err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
	}
	return fmt.Errorf("%s controllers not healthy after 5 minutes", s.name)
}

// get reads a path of the controller process.
func (c *controllerProcess) get(ctx context.Context, path string) ([]byte, error) {
	return getURL(ctx, c.http, c.url+path)
}

// getURL reads url, an error unless it answers 200.
func getURL(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, err
}

// stopControllers ends the controller process, if any.
func (s *system) stopControllers() error {
	c := s.controllers
	if c == nil {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	s.controllers = nil
	return c.log.Close()
}

// queued is the number of items waiting in the work queues of the server and
// the controller process (Kubernetes' workqueue_depth).
func (s *system) queued(ctx context.Context) (float64, error) {
	body, err := s.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	depth := parseMetrics(string(body)).sum("workqueue_depth")
	if s.controllers != nil {
		body, err := s.controllers.get(ctx, "/metrics")
		if err != nil {
			return 0, err
		}
		depth += parseMetrics(string(body)).sum("workqueue_depth")
	}
	return depth, nil
}

// waitDrained waits until every work queue is empty twice in a row, a second
// apart, or timeout passes; it returns how long that took and whether the
// queues drained.
func (s *system) waitDrained(ctx context.Context, timeout time.Duration) (time.Duration, bool, error) {
	began := time.Now()
	empty, last := 0, 0.0
	for time.Since(began) < timeout {
		depth, err := s.queued(ctx)
		if err != nil {
			return 0, false, err
		}
		if last = depth; depth == 0 {
			if empty++; empty == 2 {
				return time.Since(began), true, nil
			}
		} else {
			empty = 0
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	progress("[%s] work queues not drained after %s (%.0f items queued); measuring anyway", s.name, timeout, last)
	return time.Since(began), false, nil
}

// waitReady polls /readyz until it answers ok or the process exits.
func (s *system) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(15 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.exited:
			return fmt.Errorf("%s exited while starting: %v (see %s)", s.name, err, s.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if s.config == nil {
			if err := s.connect(); err != nil {
				continue // credentials are written while the server starts
			}
		}
		body, err := s.get(ctx, "/readyz")
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
	}
	return fmt.Errorf("%s not ready after 15 minutes", s.name)
}

// connect builds the clients' configuration from what the server wrote.
func (s *system) connect() error {
	var cfg *rest.Config
	var err error
	if s.isMilo() {
		cfg, err = clientcmd.BuildConfigFromFlags("", filepath.Join(s.dataDir, "admin.kubeconfig"))
		if err != nil {
			return err
		}
	} else {
		token, err := os.ReadFile(filepath.Join(s.dataDir, "token"))
		if err != nil {
			return err
		}
		cfg = &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", s.port), BearerToken: string(token),
			TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(s.dataDir, "pki", "ca.crt")}}
	}
	// The harness measures the server: no client-side rate limit.
	cfg.QPS, cfg.Burst = -1, -1
	cfg.Timeout = 2 * time.Minute
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	s.config, s.http = cfg, hc
	user := rest.AnonymousClientConfig(cfg)
	user.BearerToken = benchToken
	if s.userHTTP, err = rest.HTTPClientFor(user); err != nil {
		return err
	}
	s.user = user
	return nil
}

// stop sends SIGTERM and waits for the process to exit.
func (s *system) stop() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(2 * time.Minute):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
	if s.http != nil {
		s.http.CloseIdleConnections()
		s.userHTTP.CloseIdleConnections()
	}
	return s.log.Close()
}

// restart stops the server and starts it again on the same data, returning
// the time from the new process's start to /readyz. The controller process is
// stopped first (its watches would hold up the server's shutdown for a minute)
// and started again once the server is ready.
func (s *system) restart(ctx context.Context) (time.Duration, error) {
	if err := s.stopControllers(); err != nil {
		return 0, err
	}
	if err := s.stop(); err != nil {
		return 0, err
	}
	return s.start(ctx)
}

// get reads a path of the server, with query parameters as name, value pairs.
func (s *system) get(ctx context.Context, path string, params ...string) ([]byte, error) {
	client, err := kubernetes.NewForConfigAndClient(s.config, s.http)
	if err != nil {
		return nil, err
	}
	req := client.CoreV1().RESTClient().Get().AbsPath(path)
	for i := 0; i+1 < len(params); i += 2 {
		req = req.Param(params[i], params[i+1])
	}
	return req.DoRaw(ctx)
}

// projectConfig reaches where a project's objects live: Milo's project URL,
// or the platform itself for the baseline (a project is a namespace there).
func (s *system) projectConfig(project string) *rest.Config {
	if !s.isMilo() {
		return s.config
	}
	cfg := rest.CopyConfig(s.config)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.ProjectPath(project)
	return cfg
}

// namespaceOf is the namespace holding a project's objects.
func (s *system) namespaceOf(project string) string {
	if s.isMilo() {
		return "default"
	}
	return project
}

func (s *system) projectClient(project string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfigAndClient(s.projectConfig(project), s.http)
}

// writerClient is the client that fills a new project: in Milo the ordinary
// user, whose writes wait for the project to be Ready (the initialization
// gate; client-go honours its Retry-After). It shares the TLS setup, so not
// the connection pool, of the administrator's clients.
func (s *system) writerClient(project string) (kubernetes.Interface, error) {
	if !s.isMilo() {
		return s.projectClient(project)
	}
	cfg := rest.CopyConfig(s.user)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.ProjectPath(project)
	return kubernetes.NewForConfigAndClient(cfg, s.userHTTP)
}

// resources is one measurement of the server's footprint, and of the
// controller process's when there is one (Controllers; its etcd fields are 0).
type resources struct {
	RSSBytes, HeapBytes, Goroutines, EtcdWatches, EtcdDBBytes float64
	// HeapLiveBytes is the heap allocated after the forced GC: live
	// objects, without the spans' free space that HeapBytes counts.
	HeapLiveBytes float64 `json:",omitempty"`
	// Series are the sample lines of /metrics; MiloSeries those of milo_*.
	Series, MiloSeries float64
	// EtcdLeases are the leases in Milo's embedded etcd (Events' TTLs).
	EtcdLeases  float64
	Controllers *resources `json:",omitempty"`
}

// measure forces a garbage collection (the profiling endpoint's gc=1, whose
// heap profile it keeps in profile if given), then reads the process's RSS and
// the server's metrics.
func (s *system) measure(ctx context.Context, profile string) (resources, error) {
	var r resources
	s.http.CloseIdleConnections()
	s.userHTTP.CloseIdleConnections()
	heap, err := s.get(ctx, "/debug/pprof/heap", "gc", "1")
	if err != nil {
		return r, fmt.Errorf("forcing a GC: %w", err)
	}
	if profile != "" {
		if err := os.WriteFile(profile, heap, 0o644); err != nil {
			return r, err
		}
	}
	body, err := s.get(ctx, "/metrics")
	if err != nil {
		return r, err
	}
	m := parseMetrics(string(body))
	r.HeapBytes = m.sum("go_memstats_heap_inuse_bytes")
	r.HeapLiveBytes = m.sum("go_memstats_heap_alloc_bytes")
	r.Goroutines = m.sum("go_goroutines")
	// The server's own etcd clients, Milo's one client of projects' kinds,
	// and Milo's clients of its embedded etcd.
	for _, prefix := range []string{"", "milo_project_kinds_", "milo_etcd_"} {
		r.EtcdWatches += m.sum(prefix+"grpc_client_started_total", `grpc_method="Watch"`) - m.sum(prefix+"grpc_client_handled_total", `grpc_method="Watch"`)
	}
	r.EtcdDBBytes = m.max("apiserver_storage_size_bytes")
	r.Series = float64(len(m))
	for _, line := range m {
		if strings.HasPrefix(line, "milo_") {
			r.MiloSeries++
		}
	}
	if s.isMilo() {
		if r.EtcdLeases, err = s.etcdLeases(ctx); err != nil {
			return r, fmt.Errorf("counting etcd leases: %w", err)
		}
	}
	rss, err := rssOf(s.cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	r.RSSBytes = rss
	if c := s.controllers; c != nil {
		var cr resources
		heap, err := c.get(ctx, "/debug/pprof/heap?gc=1")
		if err != nil {
			return r, fmt.Errorf("forcing a GC of the controllers: %w", err)
		}
		if profile != "" {
			if err := os.WriteFile(strings.Replace(profile, "heap-", "controllers-heap-", 1), heap, 0o644); err != nil {
				return r, err
			}
		}
		body, err := c.get(ctx, "/metrics")
		if err != nil {
			return r, err
		}
		m := parseMetrics(string(body))
		cr.HeapBytes, cr.Goroutines = m.sum("go_memstats_heap_inuse_bytes"), m.sum("go_goroutines")
		if cr.RSSBytes, err = rssOf(c.cmd.Process.Pid); err != nil {
			return r, err
		}
		r.Controllers = &cr
	}
	return r, nil
}

// rssOf reads a process's resident set size from /proc.
func rssOf(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// metrics is a Prometheus text exposition, line by line.
type metrics []string

func parseMetrics(body string) metrics {
	var out metrics
	for _, line := range strings.Split(body, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// each calls fn with the value of every sample of name whose labels contain all of labels.
func (m metrics) each(name string, labels []string, fn func(float64)) {
	for _, line := range m {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64); err == nil {
			fn(v)
		}
	}
}

func (m metrics) sum(name string, labels ...string) float64 {
	var total float64
	m.each(name, labels, func(v float64) { total += v })
	return total
}

func (m metrics) max(name string, labels ...string) float64 {
	var most float64
	m.each(name, labels, func(v float64) { most = max(most, v) })
	return most
}

// controllersDescription says where the system's controllers run, for the report.
func (s *system) controllersDescription() string {
	switch {
	case s.isMilo() && s.separate:
		return "hierarchy in the server; the others in `milo controller-manager`"
	case s.isMilo():
		return "all in the server"
	case s.separate:
		return "kube-controller-manager --controllers=" + baselineControllers
	default:
		return "none"
	}
}

// baselineControllers are the controllers bench/baseline runs in kube-controller-manager.
const baselineControllers = "namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,resourcequota-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller"
