package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// The noisy-neighbour measurement: a quiet project's GET latency while
// another project floods the server, in Milo with and without per-project
// flows (--project-flows) and the tenants' budget (--tenant-cpu-share,
// --tenant-concurrency). Both projects are used by the same ordinary user,
// as one service's identity or one person acts in many projects: the case
// where API Priority and Fairness's upstream flows (one per user) cannot tell
// the projects apart.

// noisyOptions size the floods.
type noisyOptions struct {
	// Phase is how long each flood (and the idle measurement) lasts.
	Phase time.Duration
	// WriteRate is the flood's creates per second, from WriteWorkers at once.
	WriteRate, WriteWorkers int
	// ListObjects of ListObjectBytes each fill the listed namespace, which
	// is listed whole (no limit) ListRate times per second from ListWorkers.
	ListObjects, ListObjectBytes, ListRate, ListWorkers int
	// Watches are opened on one namespace, which gets WatchedWrites updates per second.
	Watches, WatchedWrites int
	// Recovery is waited before each flood when the budget is on, so that
	// it starts with the noisy project's budget full again, not in the
	// debt the one before ran up.
	Recovery time.Duration
	// ProbeRate is the quiet project's GETs per second, one at a time; 0
	// sends them back to back (the quiet project then keeps a core busy
	// itself, which is no longer quiet).
	ProbeRate int
	// ProbeInProcess runs the quiet project's GETs in the harness's own
	// process (its goroutine among the flood's clients); otherwise in a
	// process of their own (probeApart).
	ProbeInProcess bool
	// Profiles keeps a CPU profile and what was allocated (a delta of the
	// allocs profile) of the server over each phase and an execution trace
	// of a few seconds of it, noisy-{configuration}-{phase}.cpu.pprof, .allocs.pprof
	// and .trace beside the report.
	Profiles bool
}

func defaultNoisyOptions(smoke bool) noisyOptions {
	o := noisyOptions{Phase: 20 * time.Second, WriteRate: 300, WriteWorkers: 32,
		ListObjects: 1500, ListObjectBytes: 27 << 10, ListRate: 5, ListWorkers: 30, Watches: 1000, WatchedWrites: 50, ProbeRate: 100,
		Recovery: budgetRecovery}
	if smoke {
		o.Phase, o.ListObjects, o.Watches, o.Recovery = 4*time.Second, 300, 200, 0
	}
	return o
}

// noisyResult is one run of every phase in one configuration.
type noisyResult struct {
	// ProjectFlows: --project-flows; TenantBudget: --tenant-cpu-share and
	// --tenant-concurrency at their defaults.
	ProjectFlows, TenantBudget bool
	// Phases by name: idle, writes, lists, watches.
	Phases map[string]noisyPhase
}

type noisyPhase struct {
	// Quiet is the quiet project's GET latency (milliseconds); QuietErrors its failed GETs.
	Quiet       quantiles
	QuietGets   int
	QuietErrors int
	// NoisyOps is what the flood got done per second; NoisyErrors its failures (429s included).
	NoisyOps    float64
	NoisyErrors int
	// WatchesOpen is how many of the watch flood's watches the server let
	// the noisy project open.
	WatchesOpen int `json:",omitempty"`
	// RSS of the server before the phase and at its peak during it (MiB).
	RSSBeforeMiB, RSSPeakMiB float64
	// CPU used during the phase, in cores: the server's, the controller
	// manager's (when it runs apart) and the harness's own (the flood's and
	// the probe's clients), which share the machine's cores.
	ServerCores, ControllerCores, HarnessCores float64
	// ChargeRatio is the server's CPU per second of tenants' handler time
	// at the phase's end (milo_tenant_budget_cpu_per_handler_second; 0
	// without the budget).
	ChargeRatio float64 `json:",omitempty"`
	// Collections is how many garbage collections the server ran during the
	// phase (go_gc_duration_seconds_count).
	Collections float64
}

var noisyPhases = []string{"idle", "writes", "lists", "watches"}

// config names the result's configuration.
func (r noisyResult) config() string {
	switch {
	case r.ProjectFlows && r.TenantBudget:
		return "project flows and tenant budget"
	case r.ProjectFlows:
		return "project flows only"
	case r.TenantBudget:
		return "tenant budget only"
	}
	return "neither"
}

const (
	quietProject = "quiet"
	noisyProject = "noisy"
)

// budgetRecovery is how long a project's budget takes to recover from the
// deepest debt to full at the default share: 10 s of debt and 4 s of burst,
// each earned back in as long (pkg/fairness).
const budgetRecovery = 15 * time.Second

// noisyConfigs are the server configurations the floods are measured in:
// Milo's default (per-project flows and the tenants' CPU budget), flows
// alone, and neither.
var noisyConfigs = []struct {
	flows, budget bool
	args          []string
}{
	{true, true, nil},
	{true, false, []string{"--tenant-cpu-share=0", "--tenant-concurrency=0"}},
	{false, false, []string{"--project-flows=false", "--tenant-cpu-share=0", "--tenant-concurrency=0"}},
}

// measureNoisy runs every phase in each of noisyConfigs (restarting the
// server with its flags), then restarts the server as it was.
func measureNoisy(ctx context.Context, s *system, dyn dynamic.Interface, o noisyOptions) ([]noisyResult, error) {
	for _, p := range []string{quietProject, noisyProject} {
		if err := createNamedProject(ctx, s, dyn, p); err != nil {
			return nil, fmt.Errorf("creating project %s: %w", p, err)
		}
	}
	if err := fillForLists(ctx, s, o); err != nil {
		return nil, err
	}
	var out []noisyResult
	for i, config := range noisyConfigs {
		if i > 0 {
			s.extraArgs = config.args
			if _, err := s.restart(ctx); err != nil {
				return nil, err
			}
		}
		r := noisyResult{ProjectFlows: config.flows, TenantBudget: config.budget, Phases: map[string]noisyPhase{}}
		for i, phase := range noisyPhases {
			if i > 0 && config.budget {
				time.Sleep(o.Recovery)
			}
			p, err := runNoisyPhase(ctx, s, o, r.config(), phase)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", phase, r.config(), err)
			}
			progress("[%s] noisy neighbour, %s, %s: quiet GET p50 %.1f / p99 %.1f ms (%d, %d failed); flood %.0f/s (%d failed, %d watches open); RSS %.0f → %.0f MiB; %.0f collections; cores: server %.2f, controllers %.2f, harness %.2f; charge ratio %.2f",
				s.name, r.config(), phase, p.Quiet.P50, p.Quiet.P99, p.QuietGets, p.QuietErrors, p.NoisyOps, p.NoisyErrors, p.WatchesOpen, p.RSSBeforeMiB, p.RSSPeakMiB, p.Collections,
				p.ServerCores, p.ControllerCores, p.HarnessCores, p.ChargeRatio)
			r.Phases[phase] = p
		}
		out = append(out, r)
	}
	s.extraArgs = nil
	if _, err := s.restart(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// userClient is a client of project as the harness's ordinary user, on a
// connection of its own: the quiet probe must not share the flood's HTTP/2
// connection, whose stream limit would queue it behind the flood on the client.
func (s *system) userClient(project string) (kubernetes.Interface, *http.Client, error) {
	cfg := rest.CopyConfig(s.user)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.ProjectPath(project)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	c, err := kubernetes.NewForConfigAndClient(cfg, hc)
	return c, hc, err
}

const (
	floodNamespace = "default"
	listNamespace  = "kube-system" // exists in every project; holds the listed objects
)

// fillForLists puts ListObjects ConfigMaps of ListObjectBytes into the noisy
// project's listed namespace (untimed).
func fillForLists(ctx context.Context, s *system, o noisyOptions) error {
	c, hc, err := s.userClient(noisyProject)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	payload := strings.Repeat("y", o.ListObjectBytes)
	return parallel(ctx, s.name+" noisy project filled", 0, o.ListObjects, 16, func(i int) error {
		_, err := c.CoreV1().ConfigMaps(listNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%05d", i)},
			Data: map[string]string{"payload": payload}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// runNoisyPhase floods from the noisy project for o.Phase while one client
// GETs a ConfigMap of the quiet project, one request after the other.
func runNoisyPhase(ctx context.Context, s *system, o noisyOptions, config, phase string) (noisyPhase, error) {
	var out noisyPhase
	quiet, quietHTTP, err := s.userClient(quietProject)
	if err != nil {
		return out, err
	}
	defer quietHTTP.CloseIdleConnections()
	noisy, noisyHTTP, err := s.userClient(noisyProject)
	if err != nil {
		return out, err
	}
	defer noisyHTTP.CloseIdleConnections()
	probe := quiet.CoreV1().ConfigMaps(s.namespaceOf(quietProject))
	if _, err := probe.Get(ctx, "cm-0", metav1.GetOptions{}); err != nil {
		return out, fmt.Errorf("the quiet project's ConfigMap: %w", err)
	}
	if out.RSSBeforeMiB, err = s.rssMiB(); err != nil {
		return out, err
	}
	phaseCtx, stop := context.WithTimeout(ctx, o.Phase)
	defer stop()
	var ops, failures atomic.Int64
	var wg sync.WaitGroup
	flood := func(workers int, paced time.Duration, f func(ctx context.Context, worker int) error) {
		var tick <-chan time.Time
		if paced > 0 {
			t := time.NewTicker(paced)
			wg.Go(func() { <-phaseCtx.Done(); t.Stop() })
			tick = t.C
		}
		for w := range workers {
			wg.Go(func() {
				for phaseCtx.Err() == nil {
					if tick != nil {
						select {
						case <-tick:
						case <-phaseCtx.Done():
							return
						}
					}
					// A request in flight at the phase's end completes (with
					// ctx): cut short, it would only log client-side errors.
					if err := f(ctx, w); err != nil {
						if phaseCtx.Err() != nil {
							return
						}
						failures.Add(1)
						continue
					}
					ops.Add(1)
				}
			})
		}
	}
	var seq atomic.Int64
	cms := noisy.CoreV1().ConfigMaps(floodNamespace)
	switch phase {
	case "idle":
	case "writes":
		flood(o.WriteWorkers, time.Second/time.Duration(o.WriteRate), func(ctx context.Context, _ int) error {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("flood-%s-%d", time.Now().Format("150405"), seq.Add(1))},
				Data: map[string]string{"payload": kib}}, metav1.CreateOptions{})
			return err
		})
	case "lists":
		// The flood reads each list's bytes and drops them, as an attacker
		// would: decoding 200 MB/s of JSON on the harness's side would take
		// the CPU the measurement is about from the server.
		flood(o.ListWorkers, time.Second/time.Duration(o.ListRate), func(ctx context.Context, _ int) error {
			body, err := noisy.CoreV1().RESTClient().Get().Namespace(listNamespace).Resource("configmaps").Stream(ctx)
			if err != nil {
				return err
			}
			defer body.Close()
			_, err = io.Copy(io.Discard, body)
			return err
		})
	case "watches":
		watched := noisy.CoreV1().ConfigMaps(floodNamespace)
		if _, err := watched.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return out, err
		}
		// Each watch's events are read and dropped, not decoded (see lists).
		// Watches past the server's --max-project-watches are refused (429,
		// not retried here): the flood goes on with those it holds.
		opened := 0
		for range o.Watches {
			body, err := noisy.CoreV1().RESTClient().Get().Namespace(floodNamespace).Resource("configmaps").
				Param("watch", "true").Param("fieldSelector", "metadata.name=watched").MaxRetries(0).Stream(phaseCtx)
			if apierrors.IsTooManyRequests(err) {
				break
			}
			if err != nil {
				return out, fmt.Errorf("opening watch %d: %w", opened+1, err)
			}
			opened++
			wg.Go(func() {
				defer body.Close()
				_, _ = io.Copy(io.Discard, body)
			})
		}
		out.WatchesOpen = opened
		flood(1, time.Second/time.Duration(o.WatchedWrites), func(ctx context.Context, _ int) error {
			_, err := watched.Patch(ctx, "watched", "application/merge-patch+json",
				[]byte(fmt.Sprintf(`{"data":{"n":"%d"}}`, seq.Add(1))), metav1.PatchOptions{})
			return err
		})
	default:
		return out, errors.New("unknown phase " + phase)
	}
	// RSS is sampled while the flood runs.
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, err := s.rssMiB(); err == nil && rss > out.RSSPeakMiB {
				out.RSSPeakMiB = rss
			}
			select {
			case <-t.C:
			case <-phaseCtx.Done():
				return
			}
		}
	})
	if o.Profiles {
		name := fmt.Sprintf("noisy-%s-%s", strings.ReplaceAll(config, " ", "-"), phase)
		wg.Go(func() { s.profile(ctx, "/debug/pprof/profile", o.Phase-time.Second, name+".cpu.pprof") })
		wg.Go(func() { s.profile(ctx, "/debug/pprof/allocs", o.Phase-time.Second, name+".allocs.pprof") })
		wg.Go(func() {
			// The execution trace (scheduling delays: go tool trace
			// -pprof=sched) is large: a few seconds from the middle.
			select {
			case <-time.After(o.Phase / 3):
				s.profile(ctx, "/debug/pprof/trace", o.Phase/5, name+".trace")
			case <-phaseCtx.Done():
			}
		})
	}
	began := time.Now()
	cpuBefore := s.cpuSeconds()
	gcBefore := s.collections(ctx)
	var gets latencies
	var probeCPU float64
	if o.ProbeInProcess {
		gets, out.QuietErrors = paced(phaseCtx, o.ProbeRate, func(ctx context.Context) error {
			_, err := probe.Get(ctx, "cm-0", metav1.GetOptions{})
			return err
		})
	} else {
		deadline, _ := phaseCtx.Deadline()
		gets, out.QuietErrors, probeCPU, err = s.probeApart(ctx, o, time.Until(deadline))
		if err != nil {
			stop()
			wg.Wait()
			return out, err
		}
		<-phaseCtx.Done()
	}
	elapsed := time.Since(began)
	cpuAfter := s.cpuSeconds()
	out.ServerCores = (cpuAfter[0] - cpuBefore[0]) / elapsed.Seconds()
	out.ControllerCores = (cpuAfter[1] - cpuBefore[1]) / elapsed.Seconds()
	out.HarnessCores = (cpuAfter[2] - cpuBefore[2] + probeCPU) / elapsed.Seconds()
	if body, err := s.get(ctx, "/metrics"); err == nil {
		m := parseMetrics(string(body))
		out.ChargeRatio = m.max("milo_tenant_budget_cpu_per_handler_second")
		out.Collections = m.sum("go_gc_duration_seconds_count") - gcBefore
	}
	wg.Wait()
	slices.Sort(gets)
	out.Quiet = quantiles{P50: ms(gets.quantile(0.5)), P99: ms(gets.quantile(0.99))}
	out.QuietGets = len(gets)
	out.NoisyOps, out.NoisyErrors = float64(ops.Load())/elapsed.Seconds(), int(failures.Load())
	return out, nil
}

// profile keeps the server's profile at path (a CPU profile or an execution
// trace) over the next d as name beside the report; a failure is only logged,
// as the profile is not a figure.
func (s *system) profile(ctx context.Context, path string, d time.Duration, name string) {
	prof, err := s.get(ctx, path, "seconds", strconv.Itoa(max(1, int(d.Seconds()))))
	if err == nil {
		err = os.WriteFile(filepath.Join(filepath.Dir(s.dataDir), name), prof, 0o644)
	}
	if err != nil {
		progress("[%s] profile %s: %v", s.name, name, err)
	}
}

// collections is how many garbage collections the server has run.
func (s *system) collections(ctx context.Context) float64 {
	body, err := s.get(ctx, "/metrics")
	if err != nil {
		return 0
	}
	return parseMetrics(string(body)).sum("go_gc_duration_seconds_count")
}

// cpuSeconds is the CPU time, in seconds, the server, the controller
// manager running apart (0 without one) and the harness have used so far.
func (s *system) cpuSeconds() [3]float64 {
	var out [3]float64
	if s.cmd != nil {
		out[0] = cpuOf(s.cmd.Process.Pid)
	}
	if s.controllers != nil && s.controllers.cmd != nil {
		out[1] = cpuOf(s.controllers.cmd.Process.Pid)
	}
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) == nil {
		out[2] = time.Duration(u.Utime.Nano() + u.Stime.Nano()).Seconds()
	}
	return out
}

// cpuOf is the CPU time, user and system, process pid has used (0 if it
// cannot be read): /proc/<pid>/stat's utime and stime, in clock ticks of
// 1/100 s.
func cpuOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count fields after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}

// rssMiB is the server process's resident set.
func (s *system) rssMiB() (float64, error) {
	if s.cmd == nil {
		return 0, errors.New("the server is not running")
	}
	rss, err := rssOf(s.cmd.Process.Pid)
	return rss / (1 << 20), err
}
