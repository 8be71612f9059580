package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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

func newSystem(name, bin, dir string) (*system, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return &system{name: name, bin: bin, dataDir: filepath.Join(dir, "data"), port: port}, nil
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
	}
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
	return time.Since(began), nil
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
	s.http.CloseIdleConnections()
	s.userHTTP.CloseIdleConnections()
	return s.log.Close()
}

// restart stops the server and starts it again on the same data, returning
// the time from the new process's start to /readyz.
func (s *system) restart(ctx context.Context) (time.Duration, error) {
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

// resources is one measurement of the server's footprint.
type resources struct {
	RSSBytes, HeapBytes, Goroutines, EtcdWatches, EtcdDBBytes float64
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
	r.Goroutines = m.sum("go_goroutines")
	r.EtcdWatches = m.sum("grpc_client_started_total", `grpc_method="Watch"`) - m.sum("grpc_client_handled_total", `grpc_method="Watch"`)
	r.EtcdDBBytes = m.max("apiserver_storage_size_bytes")
	rss, err := rssOf(s.cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	r.RSSBytes = rss
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
