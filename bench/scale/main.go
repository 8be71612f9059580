// Command scale measures what projects cost in Milo, against the same
// workload on a plain Kubernetes generic control plane (bench/baseline) where
// each project is only a namespace.
//
//	go run ./bench/scale --max 100000 --out bench/results
//
// For each system it starts the server as its own process on loopback, then
// for each step N (100, 1,000, 10,000, 100,000 up to --max) creates projects
// up to N — each with namespace default, 3 ConfigMaps of 1 KiB and a Secret —
// waits for the controllers' work queues to drain, and measures the server's
// memory after a forced GC, goroutines and etcd watch streams, and the same of
// the controller process (Milo's `milo controller-manager`, the baseline's
// kube-controller-manager with the same controllers); GET, LIST, CREATE and
// UPDATE latency of ConfigMaps in random projects; watch delivery with a watch
// open in every tenth project; the time the controllers take to remove a
// deleted namespace and an owner's dependent; and the time from a restart to
// /readyz. At the end it deletes --delete projects. It writes report.md,
// results.json, PNG plots and each step's heap profiles
// ({system}/heap-{N}.pprof and controllers-heap-{N}.pprof, for go tool pprof)
// to --out.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/server"
)

// options configure one run of the harness.
type options struct {
	Max            int
	Steps          []int
	Out            string
	Systems        []string
	Workers        int
	LatencySamples int
	WatchSamples   int
	MiloBin        string
	BaselineBin    string
	// Repo is where the binaries are built from when not given.
	Repo string
	// Settle is waited after creating projects, before measuring memory.
	Settle time.Duration
	// Delete is how many projects are deleted at the end.
	Delete int
	// BaselineControllers runs kube-controller-manager beside the baseline.
	BaselineControllers bool
	// MiloControllers is "separate" (the server runs only the hierarchy
	// controller, `milo controller-manager` the others) or "in-process".
	MiloControllers string
	// DeletionSamples are the namespace and owner deletions timed per step.
	DeletionSamples int
	// DeletionTimeout bounds one deletion sample.
	DeletionTimeout time.Duration
	// DrainTimeout bounds the wait for the work queues to drain.
	DrainTimeout time.Duration
	// MiloArgs are added to every start of `milo start`.
	MiloArgs []string
	// CRDs, when Projects > 0, measures projects' own CRDs after the last step
	// (the baseline: the same objects stored in its namespaces; crds.go).
	CRDs crdOptions
	// Catalog, when Projects > 0, measures the service catalog after the
	// last step (Milo only).
	Catalog catalogOptions
	// Quota, when Projects > 0, measures provider quotas after the last step (Milo).
	Quota quotaOptions
	// Noisy runs the noisy-neighbour measurement after the last step (Milo only).
	Noisy        bool
	Tracing      bool
	NoisyOptions noisyOptions
	// LatencyProfile keeps a CPU profile of the server over this much of
	// each step's latency sampling (latency-{n}.cpu.pprof); 0: none.
	LatencyProfile time.Duration
	// ServiceProfile keeps server profiles over this much of each step's
	// Widget sampling (--service).
	ServiceProfile time.Duration
	// EtcdMaintenance counts, compacts and defragments the embedded etcd
	// after the last step, timed (Milo only).
	EtcdMaintenance bool
	// Service runs the sample service (bench/service) with this provider
	// ("shared" or "naive") from the first step on and measures it at each
	// step (Milo only); ServiceSamples Widgets are timed per step.
	Service        string
	ServiceSamples int
	ServiceBin     string
	// ServiceNaiveMax, with Service, also measures the naive provider (a
	// cluster per project) in the same run, at every step up to this many
	// projects: the service is stopped, the naive one started on the same
	// projects and timed, then the service started again.
	ServiceNaiveMax int
}

func main() {
	if runProbeIfAsked() {
		return
	}
	var o options
	var steps, systems, miloArgs string
	flag.IntVar(&o.Max, "max", 100000, "largest number of projects")
	flag.StringVar(&steps, "steps", "100,1000,10000,100000", "project counts to measure at (those above --max are skipped)")
	flag.StringVar(&o.Out, "out", "bench/results", "directory for report.md, results.json, the plots, logs and data")
	flag.StringVar(&systems, "systems", "milo,baseline", "systems to measure")
	flag.IntVar(&o.Workers, "workers", 32, "projects deleted at once (created: 8 times as many)")
	flag.IntVar(&o.LatencySamples, "latency-samples", 400, "samples of each ConfigMap operation per step")
	flag.IntVar(&o.WatchSamples, "watch-samples", 200, "watch deliveries timed per step")
	flag.StringVar(&o.MiloBin, "milo-bin", "", "milo binary (default: built from --repo)")
	flag.StringVar(&o.ServiceBin, "service-bin", "", "sample service binary for --service (default: built from --repo)")
	flag.StringVar(&o.BaselineBin, "baseline-bin", "", "baseline binary (default: built from --repo)")
	flag.StringVar(&o.Repo, "repo", ".", "Milo's source tree, to build the binaries")
	flag.DurationVar(&o.Settle, "settle", 80*time.Second, "wait after creating projects before measuring memory (the watch caches' event window is 75 s)")
	flag.IntVar(&o.Delete, "delete", 10000, "projects deleted at the end, timed (the rest stay in the data directory)")
	flag.BoolVar(&o.BaselineControllers, "baseline-controllers", true, "run kube-controller-manager (namespace, garbage-collector, serviceaccount, serviceaccount-token, resourcequota, root-ca-certificate-publisher, clusterrole-aggregation) beside the baseline, as its own process")
	flag.StringVar(&o.MiloControllers, "milo-controllers", "separate", "where Milo's controllers run: separate (`milo controller-manager` runs all but hierarchy, which stays in the server) or in-process (all in `milo start`; no controller figures)")
	flag.IntVar(&o.DeletionSamples, "deletion-samples", 50, "namespace deletions and owner deletions timed per step")
	flag.DurationVar(&o.DeletionTimeout, "deletion-timeout", 2*time.Minute, "longest wait for one deleted namespace or dependent to go (counted as this long, and reported)")
	flag.DurationVar(&o.DrainTimeout, "drain-timeout", 15*time.Minute, "longest wait for the controllers' work queues to drain before measuring")
	flag.BoolVar(&o.Tracing, "tracing", false, "after the last step, time requests with tracing off, at sampling 0 and at 1% exported to a loopback OTLP receiver (Milo only)")
	flag.BoolVar(&o.EtcdMaintenance, "etcd-maintenance", true, "after the last step, count etcd's keys, compact it to the current revision and defragment it, timed (Milo on its embedded etcd)")
	flag.BoolVar(&o.Noisy, "noisy", true, "after the last step, measure a quiet project's GETs while another project floods the server, with and without per-project flows (Milo only)")
	flag.StringVar(&miloArgs, "milo-args", "", "flags added to every `milo start`, separated by spaces (e.g. --project-list-concurrency=4)")
	flag.DurationVar(&o.LatencyProfile, "latency-profile", 0, "keep a CPU profile of the server over this much of each step's latency sampling (latency-{projects}.cpu.pprof), and log its collections and CPU time over the sampling; 0: none")
	noisyProfiles := flag.Bool("noisy-profiles", false, "keep a CPU profile and an allocation profile of the server over each noisy-neighbour phase and an execution trace of a few seconds of it (noisy-{configuration}-{phase}.cpu.pprof, .allocs.pprof and .trace)")
	probeInProcess := flag.Bool("noisy-probe-in-process", false, "run the quiet project's GETs in the harness's own process, beside the flood's clients, as before (default: a process of its own, one core)")
	probeRate := flag.Int("noisy-probe-rate", -1, "the quiet project's GETs per second in the noisy-neighbour measurement (-1: the default, 100; 0: back to back)")
	flag.IntVar(&o.CRDs.Projects, "crd-projects", 0, "after the last step, this many projects each define --crd-per-project CRDs of the same schemas and one instance of each (the baseline stores the same objects in their namespaces); 0: not measured")
	flag.IntVar(&o.CRDs.PerProject, "crd-per-project", 10, "CRDs each of --crd-projects defines")
	flag.IntVar(&o.CRDs.Unique, "crd-unique", 0, "then this many further projects each define one CRD of a schema of its own")
	flag.IntVar(&o.CRDs.Samples, "crd-samples", 200, "CRDs timed from create to Established")
	flag.IntVar(&o.Catalog.Projects, "catalog-projects", 0, "after the last step, this many projects enable a registered service (Milo); 0: the service catalog is not measured")
	flag.IntVar(&o.Catalog.Services, "catalog-services", 50, "services registered in all for the catalog's discovery measurement")
	flag.IntVar(&o.Catalog.Samples, "catalog-samples", 400, "GETs and discovery documents timed before and after the enablements")
	flag.IntVar(&o.Quota.Projects, "quota-projects", 0, "after the last step, this many projects get a grant (and a bucket) each, and ConfigMap creates and project creation are timed with and without quota (Milo); 0: not measured")
	flag.IntVar(&o.Quota.Created, "quota-created", 2000, "projects created in an organization with and in one without a projects quota")
	flag.IntVar(&o.Quota.Samples, "quota-samples", 400, "ConfigMap creates timed per series")
	flag.BoolVar(&o.Quota.Profiles, "quota-profiles", false, "keep a CPU profile of the server over each timed series of ConfigMap creates (quota-{off,metered,uncharged,charged}.cpu.pprof)")
	flag.StringVar(&o.Service, "service", "", "run the sample service with this provider (shared: pkg/mcprovider with the builder's watches; sources: pkg/mcprovider's Sources, projects not engaged; naive: a cluster per project) and measure it at each step: one Widget per project (Milo only)")
	flag.DurationVar(&o.ServiceProfile, "service-profile", 0, "keep a CPU and an allocation profile of the server over this much of each step's Widget sampling (service-sampled-{projects}.{cpu,allocs}.pprof); 0: none")
	flag.IntVar(&o.ServiceSamples, "service-samples", 100, "Widgets timed from create to Ready per step")
	flag.IntVar(&o.ServiceNaiveMax, "service-naive-max", 0, "with --service, also measure the naive provider (a cluster per project) at each step up to this many projects, in the same run: the service stopped meanwhile")
	smoke := flag.Bool("smoke", false, "quick run: at most 1,000 projects, few samples, no settling, 300 projects deleted")
	klog.InitFlags(nil)
	flag.Parse()
	o.MiloArgs = strings.Fields(miloArgs)
	if o.CRDs.Projects > 0 {
		o.MiloArgs = append(o.MiloArgs, fmt.Sprintf("--max-project-crds=%d", max(o.CRDs.PerProject, 200)))
	}
	for _, s := range strings.Split(steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "scale: bad step %q\n", s)
			os.Exit(2)
		}
		o.Steps = append(o.Steps, n)
	}
	o.Systems = strings.Split(systems, ",")
	o.NoisyOptions = defaultNoisyOptions(*smoke)
	o.NoisyOptions.Profiles = *noisyProfiles
	if *probeRate >= 0 {
		o.NoisyOptions.ProbeRate = *probeRate
	}
	o.NoisyOptions.ProbeInProcess = *probeInProcess
	if *smoke {
		o.Max, o.LatencySamples, o.WatchSamples, o.Settle, o.DeletionSamples = min(o.Max, 1000), 100, 50, 0, min(o.DeletionSamples, 10)
		o.Delete = min(o.Delete, 300)
	}
	if o.MiloControllers != "separate" && o.MiloControllers != "in-process" {
		fmt.Fprintf(os.Stderr, "scale: --milo-controllers is separate or in-process, not %q\n", o.MiloControllers)
		os.Exit(2)
	}
	if _, err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// progress reports what the harness is doing; a full run takes a while.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// run measures every system and writes the report; it returns the results.
func run(ctx context.Context, o options) (*results, error) {
	var steps []int
	for _, n := range o.Steps {
		if n <= o.Max {
			steps = append(steps, n)
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no step at or below --max %d", o.Max)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	if err := buildBinaries(&o); err != nil {
		return nil, err
	}
	res := &results{Machine: machine(), Command: strings.Join(append([]string{"go run ./bench/scale"}, os.Args[1:]...), " "), Started: time.Now().UTC(), Steps: steps}
	for _, name := range o.Systems {
		bin := o.MiloBin
		if name == "baseline" {
			bin = o.BaselineBin
		}
		res.Systems = append(res.Systems, systemResult{Name: name})
		// Results are written after every step, so a long run that stops
		// early still leaves what it measured.
		err := measureSystem(ctx, o, &res.Systems[len(res.Systems)-1], bin, steps, func() error { return res.write(o.Out) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	res.Finished = time.Now().UTC()
	if err := res.write(o.Out); err != nil {
		return nil, err
	}
	progress("report written to %s", filepath.Join(o.Out, "report.md"))
	return res, nil
}

func buildBinaries(o *options) error {
	bin := filepath.Join(o.Out, "bin")
	for _, b := range []struct {
		path *string
		pkg  string
	}{{&o.MiloBin, "./cmd/milo"}, {&o.BaselineBin, "./bench/baseline"}, {&o.ServiceBin, "./bench/service"}} {
		if *b.path != "" || (b.path == &o.ServiceBin && o.Service == "") {
			continue
		}
		*b.path = filepath.Join(bin, filepath.Base(b.pkg))
		abs, err := filepath.Abs(*b.path)
		if err != nil {
			return err
		}
		*b.path = abs
		progress("building %s", b.pkg)
		cmd := exec.Command("go", "build", "-o", abs, b.pkg)
		cmd.Dir, cmd.Stdout, cmd.Stderr = o.Repo, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s: %w", b.pkg, err)
		}
	}
	return nil
}

func measureSystem(ctx context.Context, o options, out *systemResult, bin string, steps []int, save func() error) error {
	name := out.Name
	dir := filepath.Join(o.Out, name)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	s, err := newSystem(name, bin, dir, o)
	if err != nil {
		return err
	}
	out.Controllers = s.controllersDescription()
	progress("[%s] starting (%s)", name, out.Controllers)
	// The controllers stop first: their watches would hold up the server's shutdown.
	defer s.stop()            //nolint:errcheck
	defer s.stopControllers() //nolint:errcheck
	if _, err := s.start(ctx); err != nil {
		return err
	}
	if err := prepare(ctx, s); err != nil {
		return err
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 15 * time.Minute
	}
	if o.DeletionTimeout <= 0 {
		o.DeletionTimeout = 2 * time.Minute
	}
	drain := func() (time.Duration, bool, error) {
		if !s.hasControllers() {
			return 0, true, nil
		}
		return s.waitDrained(ctx, o.DrainTimeout)
	}
	if _, _, err := drain(); err != nil {
		return err
	}
	empty, err := s.measure(ctx, "")
	if err != nil {
		return err
	}
	out.Empty = empty
	rng := rand.New(rand.NewPCG(1, 2))
	var service *serviceProcess
	if s.isMilo() && o.Service != "" {
		progress("[%s] starting the sample service (%s provider)", name, o.Service)
		if service, err = startService(ctx, s, o.ServiceBin, o.Service, o.Repo); err != nil {
			return fmt.Errorf("the sample service: %w", err)
		}
		defer func() { service.stop() }() // the service in use at the end
	}
	widgets := 0
	have := 0
	for _, n := range steps {
		step := stepResult{Projects: n}
		progress("[%s] creating projects %d → %d", name, have, n)
		dyn, err := dynamic.NewForConfigAndClient(s.config, s.http)
		if err != nil {
			return err
		}
		began, cpuBefore := time.Now(), s.cpuSeconds()
		// Many at once: in Milo a new project's first write waits for Ready
		// (Retry-After: 1 s), which 32 clients would turn into the limit.
		if err := parallel(ctx, name+" projects created", have, n, o.Workers*8, func(i int) error { return createProject(ctx, s, dyn, i) }); err != nil {
			return err
		}
		step.CreatePerSecond = float64(n-have) / time.Since(began).Seconds()
		if created := n - have; created > 0 {
			cpuAfter := s.cpuSeconds()
			step.CreateCPU = &[3]float64{}
			for k := range step.CreateCPU {
				step.CreateCPU[k] = (cpuAfter[k] - cpuBefore[k]) * 1000 / float64(created)
			}
			progress("[%s] %d projects created at %.0f/s; CPU per project: server %.2f ms, controllers %.2f ms, harness %.2f ms",
				name, n, step.CreatePerSecond, step.CreateCPU[0], step.CreateCPU[1], step.CreateCPU[2])
		}
		have = n
		// The controllers' work (bootstrap objects, in the baseline too) is
		// done before anything is measured.
		took, drained, err := drain()
		if err != nil {
			return err
		}
		step.DrainSeconds, step.Drained = took.Seconds(), drained
		progress("[%s] %d projects: work queues drained %.1f s after creation", name, n, step.DrainSeconds)
		if out.Bootstrap == nil {
			b, err := measureBootstrap(ctx, s)
			if err != nil {
				return fmt.Errorf("counting bootstrap objects: %w", err)
			}
			out.Bootstrap = &b
			progress("[%s] bootstrap objects per project: %d, %d bytes %v", name, b.Count, b.Bytes, b.Objects)
		}
		if o.Settle > 0 {
			// The watch caches keep recent events (75 s): memory is measured
			// once the creation's events have left them, as in a steady state.
			progress("[%s] settling for %s", name, o.Settle)
			time.Sleep(o.Settle)
		}
		if step.Resources, err = s.measure(ctx, filepath.Join(dir, fmt.Sprintf("heap-%d.pprof", n))); err != nil {
			return err
		}
		progress("[%s] %d projects: heap %.0f MiB, RSS %.0f MiB, %v goroutines, %v etcd watches; %.0f projects/s",
			name, n, step.Resources.HeapBytes/(1<<20), step.Resources.RSSBytes/(1<<20), step.Resources.Goroutines, step.Resources.EtcdWatches, step.CreatePerSecond)
		if c := step.Resources.Controllers; c != nil {
			progress("[%s] %d projects: controllers' heap %.1f MiB, RSS %.0f MiB, %v goroutines", name, n, c.HeapBytes/(1<<20), c.RSSBytes/(1<<20), c.Goroutines)
		}
		var profiled sync.WaitGroup
		gcBefore, cpuBefore, sampled := s.collections(ctx), s.cpuSeconds(), time.Now()
		if o.LatencyProfile > 0 {
			profiled.Go(func() {
				s.profile(ctx, "/debug/pprof/profile", o.LatencyProfile, fmt.Sprintf("latency-%d.cpu.pprof", n))
			})
		}
		lat, err := measureLatency(ctx, s, n, o.LatencySamples, rng)
		if err != nil {
			return err
		}
		if o.LatencyProfile > 0 {
			cpuAfter := s.cpuSeconds()
			progress("[%s] %d projects: latency sampling took %.1f s, %.0f collections, server CPU %.1f s, controllers %.1f s", name, n,
				time.Since(sampled).Seconds(), s.collections(ctx)-gcBefore, cpuAfter[0]-cpuBefore[0], cpuAfter[1]-cpuBefore[1])
			profiled.Wait()
		}
		step.Latency = map[string]quantiles{}
		for op, l := range lat {
			step.Latency[op] = quantiles{P50: ms(l.quantile(0.5)), P99: ms(l.quantile(0.99))}
		}
		w, open, err := measureWatch(ctx, s, n, o.WatchSamples, rng)
		if err != nil {
			return err
		}
		step.Latency["watch"] = quantiles{P50: ms(w.quantile(0.5)), P99: ms(w.quantile(0.99))}
		step.WatchesOpen = open
		progress("[%s] %d projects: p99 get %.1f ms, list %.1f ms, create %.1f ms, update %.1f ms, watch %.1f ms (%d watches)", name, n,
			step.Latency["get"].P99, step.Latency["list"].P99, step.Latency["create"].P99, step.Latency["update"].P99, step.Latency["watch"].P99, open)
		if s.hasControllers() && o.DeletionSamples > 0 {
			if _, _, err := drain(); err != nil {
				return err
			}
			del, timedOut, err := measureDeletion(ctx, s, n, o.DeletionSamples, rng, o.DeletionTimeout)
			if err != nil {
				return err
			}
			step.Deletion = map[string]quantiles{}
			for op, l := range del {
				step.Deletion[op] = quantiles{P50: ms(l.quantile(0.5)), P99: ms(l.quantile(0.99))}
			}
			step.DeletionSamples, step.DeletionTimeouts = len(del["owner"]), timedOut
			progress("[%s] %d projects: namespace deletion p50 %.0f / p99 %.0f ms, owner deletion p50 %.0f / p99 %.0f ms (%d samples, %d timed out)", name, n,
				step.Deletion["namespace"].P50, step.Deletion["namespace"].P99, step.Deletion["owner"].P50, step.Deletion["owner"].P99, step.DeletionSamples, timedOut)
		}
		if service != nil {
			st, err := measureService(ctx, s, service, widgets, n, o.ServiceSamples, o.Workers*2, filepath.Join(dir, fmt.Sprintf("service-heap-%d.pprof", n)), o.ServiceProfile)
			if err != nil {
				return fmt.Errorf("the sample service at %d projects: %w", n, err)
			}
			st.Provider, widgets = o.Service, n
			out.Service = append(out.Service, st)
			progress("[%s] %d projects: service (%s) heap %.1f MiB, %v goroutines; widget create → Ready p50 %.0f / p99 %.0f ms (%.1f s, %.0f server collections); %.0f widgets/s",
				name, n, o.Service, st.HeapBytes/(1<<20), st.Goroutines, st.Ready.P50, st.Ready.P99, st.SamplingSeconds, st.ServerCollections, st.WidgetsPerSecond)
			if n <= o.ServiceNaiveMax && o.Service != "naive" {
				service.stop()
				nst, err := measureNaive(ctx, s, o, n, filepath.Join(dir, fmt.Sprintf("service-naive-heap-%d.pprof", n)))
				if err != nil {
					return fmt.Errorf("the naive service at %d projects: %w", n, err)
				}
				out.Service = append(out.Service, nst)
				progress("[%s] %d projects: service (naive) engaged all in %.1f s; heap %.1f MiB, %v goroutines; widget create → Ready p50 %.0f / p99 %.0f ms",
					name, n, nst.ReadyWaitSeconds, nst.HeapBytes/(1<<20), nst.Goroutines, nst.Ready.P50, nst.Ready.P99)
				progress("[%s] starting the sample service (%s provider) again", name, o.Service)
				again, err := startService(ctx, s, o.ServiceBin, o.Service, o.Repo)
				if err != nil {
					return fmt.Errorf("the sample service: %w", err)
				}
				service = again
			}
		}
		restart, err := s.restart(ctx)
		if err != nil {
			return err
		}
		step.RestartSeconds = restart.Seconds()
		progress("[%s] %d projects: restart to ready in %.1f s", name, n, step.RestartSeconds)
		if s.isMilo() {
			// Series of a server that has only started and caught up: the
			// same history at every step, so what grows is what projects add.
			if _, _, err := drain(); err != nil {
				return err
			}
			if step.SeriesAfterRestart, err = s.series(ctx, filepath.Join(dir, fmt.Sprintf("metrics-%d.txt", n))); err != nil {
				return err
			}
			progress("[%s] %d projects: %.0f series after the restart", name, n, step.SeriesAfterRestart)
		}
		out.Steps = append(out.Steps, step)
		if err := save(); err != nil {
			return err
		}
	}
	if o.CRDs.Projects > 0 {
		if o.CRDs.Projects+o.CRDs.Unique > have {
			return fmt.Errorf("--crd-projects and --crd-unique need %d projects, the last step has %d", o.CRDs.Projects+o.CRDs.Unique, have)
		}
		if out.CRDs, err = measureProjectCRDs(ctx, s, o.CRDs, o.Settle, dir); err != nil {
			return fmt.Errorf("project CRDs: %w", err)
		}
		if err := save(); err != nil {
			return err
		}
	}
	if s.isMilo() && o.Catalog.Projects > 0 {
		if o.Catalog.Projects > have {
			return fmt.Errorf("--catalog-projects needs %d projects, the last step has %d", o.Catalog.Projects, have)
		}
		if out.Catalog, err = measureCatalog(ctx, s, o.Catalog, o.Settle, dir); err != nil {
			return fmt.Errorf("service catalog: %w", err)
		}
		if err := save(); err != nil {
			return err
		}
	}
	if s.isMilo() && o.Quota.Projects > 0 {
		if o.Quota.Projects > have {
			return fmt.Errorf("--quota-projects needs %d projects, the last step has %d", o.Quota.Projects, have)
		}
		if out.Quota, err = measureQuota(ctx, s, o.Quota, o.Settle, dir); err != nil {
			return fmt.Errorf("quotas: %w", err)
		}
		if err := save(); err != nil {
			return err
		}
	}
	if s.isMilo() && o.Tracing {
		if out.Tracing, err = measureTracing(ctx, s, have, o.LatencySamples, dir, o.DrainTimeout); err != nil {
			return fmt.Errorf("tracing: %w", err)
		}
		if err := save(); err != nil {
			return err
		}
	}
	if s.isMilo() && o.Noisy {
		dyn, err := dynamic.NewForConfigAndClient(s.config, s.http)
		if err != nil {
			return err
		}
		if out.Noisy, err = measureNoisy(ctx, s, dyn, o.NoisyOptions); err != nil {
			return fmt.Errorf("noisy neighbour: %w", err)
		}
		out.NoisyOptions = &o.NoisyOptions
		if err := save(); err != nil {
			return err
		}
	}
	if s.isMilo() && o.EtcdMaintenance {
		if _, err := os.Stat(server.EtcdURLFile(s.dataDir)); err == nil { // not on kine
			progress("[%s] %d projects: counting, compacting and defragmenting etcd", name, have)
			if out.Etcd, err = measureEtcd(ctx, s, have); err != nil {
				return fmt.Errorf("etcd: %w", err)
			}
			progress("[%s] %d projects: %d keys, compaction %.2f s, defragmentation %.2f s, %.1f MiB in use", name, have,
				out.Etcd.Keys, out.Etcd.CompactSeconds, out.Etcd.DefragSeconds, toMiB(float64(out.Etcd.InUseCompacted)))
			if err := save(); err != nil {
				return err
			}
		}
	}
	// A restarted server's controllers go through every object again first.
	if _, _, err := drain(); err != nil {
		return err
	}
	out.Deleted = min(o.Delete, have)
	progress("[%s] deleting %d projects", name, out.Deleted)
	began := time.Now()
	if err := deleteProjects(ctx, s, out.Deleted, o.Workers); err != nil {
		return err
	}
	out.DeleteSeconds = time.Since(began).Seconds()
	out.DeletePerSecond = float64(out.Deleted) / out.DeleteSeconds
	progress("[%s] %d projects deleted in %.1f s (%.0f/s)", name, out.Deleted, out.DeleteSeconds, out.DeletePerSecond)
	return save()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
