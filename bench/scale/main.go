// Command scale measures what projects cost in Milo, against the same
// workload on a plain Kubernetes generic control plane (bench/baseline) where
// each project is only a namespace.
//
//	go run ./bench/scale --max 100000 --out bench/results
//
// For each system it starts the server as its own process on loopback, then
// for each step N (100, 1,000, 10,000, 100,000 up to --max) creates projects
// up to N — each with namespace default, 3 ConfigMaps of 1 KiB and a Secret —
// and measures the server's memory after a forced GC, goroutines and etcd
// watch streams; GET, LIST, CREATE and UPDATE latency of ConfigMaps in random
// projects; watch delivery with a watch open in every tenth project; and the
// time from a restart to /readyz. At the end it deletes --delete projects. It
// writes report.md, results.json, PNG plots and each step's heap profile
// ({system}/heap-{N}.pprof, for go tool pprof) to --out.
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
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
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
}

func main() {
	var o options
	var steps, systems string
	flag.IntVar(&o.Max, "max", 100000, "largest number of projects")
	flag.StringVar(&steps, "steps", "100,1000,10000,100000", "project counts to measure at (those above --max are skipped)")
	flag.StringVar(&o.Out, "out", "bench/results", "directory for report.md, results.json, the plots, logs and data")
	flag.StringVar(&systems, "systems", "milo,baseline", "systems to measure")
	flag.IntVar(&o.Workers, "workers", 32, "projects deleted at once (created: 8 times as many)")
	flag.IntVar(&o.LatencySamples, "latency-samples", 400, "samples of each ConfigMap operation per step")
	flag.IntVar(&o.WatchSamples, "watch-samples", 200, "watch deliveries timed per step")
	flag.StringVar(&o.MiloBin, "milo-bin", "", "milo binary (default: built from --repo)")
	flag.StringVar(&o.BaselineBin, "baseline-bin", "", "baseline binary (default: built from --repo)")
	flag.StringVar(&o.Repo, "repo", ".", "Milo's source tree, to build the binaries")
	flag.DurationVar(&o.Settle, "settle", 80*time.Second, "wait after creating projects before measuring memory (the watch caches' event window is 75 s)")
	flag.IntVar(&o.Delete, "delete", 10000, "projects deleted at the end, timed (the rest stay in the data directory)")
	smoke := flag.Bool("smoke", false, "quick run: at most 1,000 projects, few samples, no settling")
	klog.InitFlags(nil)
	flag.Parse()
	for _, s := range strings.Split(steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "scale: bad step %q\n", s)
			os.Exit(2)
		}
		o.Steps = append(o.Steps, n)
	}
	o.Systems = strings.Split(systems, ",")
	if *smoke {
		o.Max, o.LatencySamples, o.WatchSamples, o.Settle = min(o.Max, 1000), 100, 50, 0
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
	}{{&o.MiloBin, "./cmd/milo"}, {&o.BaselineBin, "./bench/baseline"}} {
		if *b.path != "" {
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
	s, err := newSystem(name, bin, dir)
	if err != nil {
		return err
	}
	progress("[%s] starting", name)
	if _, err := s.start(ctx); err != nil {
		return err
	}
	defer s.stop() //nolint:errcheck
	if err := prepare(ctx, s); err != nil {
		return err
	}
	empty, err := s.measure(ctx, "")
	if err != nil {
		return err
	}
	out.Empty = empty
	rng := rand.New(rand.NewPCG(1, 2))
	have := 0
	for _, n := range steps {
		step := stepResult{Projects: n}
		progress("[%s] creating projects %d → %d", name, have, n)
		dyn, err := dynamic.NewForConfigAndClient(s.config, s.http)
		if err != nil {
			return err
		}
		began := time.Now()
		// Many at once: in Milo a new project's first write waits for Ready
		// (Retry-After: 1 s), which 32 clients would turn into the limit.
		if err := parallel(ctx, name+" projects created", have, n, o.Workers*8, func(i int) error { return createProject(ctx, s, dyn, i) }); err != nil {
			return err
		}
		step.CreatePerSecond = float64(n-have) / time.Since(began).Seconds()
		have = n
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
		lat, err := measureLatency(ctx, s, n, o.LatencySamples, rng)
		if err != nil {
			return err
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
		restart, err := s.restart(ctx)
		if err != nil {
			return err
		}
		step.RestartSeconds = restart.Seconds()
		progress("[%s] %d projects: restart to ready in %.1f s", name, n, step.RestartSeconds)
		out.Steps = append(out.Steps, step)
		if err := save(); err != nil {
			return err
		}
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
