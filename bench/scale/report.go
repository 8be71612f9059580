package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// results is everything one run measured.
type results struct {
	Machine           string
	Command           string
	Started, Finished time.Time
	Steps             []int
	Systems           []systemResult
}

type systemResult struct {
	Name string
	// Controllers says where the controllers ran.
	Controllers string
	// Empty is the server before the first project.
	Empty resources
	// Bootstrap is what the first project holds that the harness did not create.
	Bootstrap *bootstrap `json:",omitempty"`
	Steps     []stepResult
	// Deleted projects at the end, in DeleteSeconds.
	Deleted         int
	DeleteSeconds   float64
	DeletePerSecond float64
	// CRDs is the measurement of projects' own CRDs at the last step (the baseline: the same objects stored; crds.go).
	CRDs *crdResult `json:",omitempty"`
	// Catalog is the service catalog's measurement (Milo only).
	Catalog *catalogResult `json:",omitempty"`
	// Quota is the provider quotas' measurement (Milo only).
	Quota *quotaResult `json:",omitempty"`
	// Noisy is the noisy-neighbour measurement at the last step (Milo only),
	// with and without per-project flows.
	Noisy []noisyResult `json:",omitempty"`
	// Service is the sample service's measurement at each step (--service).
	Service []serviceStep `json:",omitempty"`
	// Tracing is the cost of tracing at the last step (Milo only, --tracing).
	Tracing *tracingResult `json:",omitempty"`
	// Etcd is etcd's keys, size, compaction and defragmentation at the
	// last step (Milo on its embedded etcd, --etcd-maintenance).
	Etcd *etcdResult `json:",omitempty"`
	// NoisyOptions sized its floods.
	NoisyOptions *noisyOptions `json:",omitempty"`
}

type stepResult struct {
	Projects        int
	CreatePerSecond float64
	// CreateCPU is the CPU, in milliseconds per project created, that the
	// server, the controller process and the harness itself used while the
	// step's projects were created: what the rate above is spent on.
	CreateCPU *[3]float64 `json:",omitempty"`
	Resources resources
	// Latency by operation: get, list, create, update, watch (milliseconds).
	Latency        map[string]quantiles
	WatchesOpen    int
	RestartSeconds float64
	// DrainSeconds is the wait, after creating the projects, until the work
	// queues were empty (Drained false: they were not within --drain-timeout).
	DrainSeconds float64
	Drained      bool
	// Deletion latency (milliseconds): "namespace" from a namespace's DELETE
	// to its removal, "owner" from an owner's DELETE to its dependent's removal.
	Deletion         map[string]quantiles `json:",omitempty"`
	DeletionSamples  int                  `json:",omitempty"`
	DeletionTimeouts int                  `json:",omitempty"`
	// SeriesAfterRestart are /metrics' sample lines once the server restarted
	// at the end of the step has caught up (Milo).
	SeriesAfterRestart float64 `json:",omitempty"`
}

type quantiles struct{ P50, P99 float64 }

var operations = []string{"get", "list", "create", "update", "watch"}

// perProject is the heap a project adds: (heap at N − heap empty) / N.
func (s systemResult) perProject(i int) float64 {
	st := s.Steps[i]
	return (st.Resources.HeapBytes - s.Empty.HeapBytes) / float64(st.Projects)
}

// controllerPerProject is the controller process's heap a project adds, or NaN.
func (s systemResult) controllerPerProject(i int) float64 {
	st := s.Steps[i]
	if st.Resources.Controllers == nil || s.Empty.Controllers == nil {
		return math.NaN()
	}
	return (st.Resources.Controllers.HeapBytes - s.Empty.Controllers.HeapBytes) / float64(st.Projects)
}

// controller reads a figure of the controller process at step i, or NaN.
func (s systemResult) controller(i int, f func(r *resources) float64) float64 {
	if c := s.Steps[i].Resources.Controllers; c != nil {
		return f(c)
	}
	return math.NaN()
}

// deletion reads a deletion quantile at step i, or NaN.
func (s systemResult) deletion(i int, op string, p99 bool) float64 {
	q, ok := s.Steps[i].Deletion[op]
	switch {
	case !ok:
		return math.NaN()
	case p99:
		return q.P99
	default:
		return q.P50
	}
}

func machine() string {
	mem := ""
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		if sc.Scan() {
			mem = strings.Join(strings.Fields(sc.Text())[1:], " ") + " memory"
		}
		f.Close()
	}
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s, %s/%s, %s", runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func (r *results) system(name string) *systemResult {
	for i := range r.Systems {
		if r.Systems[i].Name == name {
			return &r.Systems[i]
		}
	}
	return nil
}

func (r *results) write(dir string) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), raw, 0o644); err != nil {
		return err
	}
	if err := r.plotMemory(filepath.Join(dir, "memory-per-project.png")); err != nil {
		return err
	}
	if err := r.plotLatency(filepath.Join(dir, "p99-latency.png")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.markdown()), 0o644)
}

// row is one line of a comparison table.
type row struct {
	name  string
	value func(s *systemResult, i int) float64
	unit  string
	// format of the values.
	format string
}

func (r *results) rows() []row {
	mib := func(v float64) float64 { return v / (1 << 20) }
	rows := []row{
		{"Heap in use after GC", func(s *systemResult, i int) float64 { return mib(s.Steps[i].Resources.HeapBytes) }, "MiB", "%.1f"},
		{"Heap per project", func(s *systemResult, i int) float64 { return s.perProject(i) / 1024 }, "KiB", "%.1f"},
		{"Heap per project since the previous step", func(s *systemResult, i int) float64 {
			prevHeap, prevN := s.Empty.HeapBytes, 0
			if i > 0 {
				prevHeap, prevN = s.Steps[i-1].Resources.HeapBytes, s.Steps[i-1].Projects
			}
			return (s.Steps[i].Resources.HeapBytes - prevHeap) / float64(s.Steps[i].Projects-prevN) / 1024
		}, "KiB", "%.1f"},
		// Live: what the collector found reachable, without the free space
		// of the spans it keeps (which the rows above count, and which
		// depends on how the live objects lie among the garbage).
		{"Live heap after GC", func(s *systemResult, i int) float64 { return mib(s.Steps[i].Resources.HeapLiveBytes) }, "MiB", "%.1f"},
		{"Live heap per project since the previous step", func(s *systemResult, i int) float64 {
			prevHeap, prevN := s.Empty.HeapLiveBytes, 0
			if i > 0 {
				prevHeap, prevN = s.Steps[i-1].Resources.HeapLiveBytes, s.Steps[i-1].Projects
			}
			if s.Steps[i].Resources.HeapLiveBytes == 0 || prevHeap == 0 {
				return math.NaN()
			}
			return (s.Steps[i].Resources.HeapLiveBytes - prevHeap) / float64(s.Steps[i].Projects-prevN) / 1024
		}, "KiB", "%.1f"},
		{"RSS", func(s *systemResult, i int) float64 { return mib(s.Steps[i].Resources.RSSBytes) }, "MiB", "%.0f"},
		{"etcd database", func(s *systemResult, i int) float64 { return mib(s.Steps[i].Resources.EtcdDBBytes) }, "MiB", "%.1f"},
		{"Goroutines", func(s *systemResult, i int) float64 { return s.Steps[i].Resources.Goroutines }, "", "%.0f"},
		{"etcd watch streams", func(s *systemResult, i int) float64 { return s.Steps[i].Resources.EtcdWatches }, "", "%.0f"},
		{"etcd database per project", func(s *systemResult, i int) float64 {
			return (s.Steps[i].Resources.EtcdDBBytes - s.Empty.EtcdDBBytes) / float64(s.Steps[i].Projects) / 1024
		}, "KiB", "%.1f"},
		{"Create to usable", func(s *systemResult, i int) float64 { return s.Steps[i].CreatePerSecond }, "projects/s", "%.0f"},
		{"Server CPU per project created", func(s *systemResult, i int) float64 { return s.createCPU(i, 0) }, "ms", "%.2f"},
		{"Controller process CPU per project created", func(s *systemResult, i int) float64 { return s.createCPU(i, 1) }, "ms", "%.2f"},
		{"Harness CPU per project created", func(s *systemResult, i int) float64 { return s.createCPU(i, 2) }, "ms", "%.2f"},
		{"Work queues drained after creation", func(s *systemResult, i int) float64 { return s.Steps[i].DrainSeconds }, "s", "%.1f"},
		{"Controller process heap after GC", func(s *systemResult, i int) float64 {
			return s.controller(i, func(r *resources) float64 { return mib(r.HeapBytes) })
		}, "MiB", "%.1f"},
		{"Controller heap per project", func(s *systemResult, i int) float64 { return s.controllerPerProject(i) / 1024 }, "KiB", "%.2f"},
		{"Controller heap per project since the previous step", func(s *systemResult, i int) float64 {
			if s.Steps[i].Resources.Controllers == nil {
				return math.NaN()
			}
			prev, prevN := s.Empty.Controllers, 0
			if i > 0 {
				prev, prevN = s.Steps[i-1].Resources.Controllers, s.Steps[i-1].Projects
			}
			if prev == nil {
				return math.NaN()
			}
			return (s.Steps[i].Resources.Controllers.HeapBytes - prev.HeapBytes) / float64(s.Steps[i].Projects-prevN) / 1024
		}, "KiB", "%.2f"},
		{"Controller process RSS", func(s *systemResult, i int) float64 {
			return s.controller(i, func(r *resources) float64 { return mib(r.RSSBytes) })
		}, "MiB", "%.0f"},
		{"Controller goroutines", func(s *systemResult, i int) float64 {
			return s.controller(i, func(r *resources) float64 { return r.Goroutines })
		}, "", "%.0f"},
	}
	for _, op := range operations {
		for _, q := range []string{"p50", "p99"} {
			rows = append(rows, row{fmt.Sprintf("%s %s", strings.ToUpper(op[:1])+op[1:], q), func(s *systemResult, i int) float64 {
				if q == "p50" {
					return s.Steps[i].Latency[op].P50
				}
				return s.Steps[i].Latency[op].P99
			}, "ms", "%.1f"})
		}
	}
	for _, d := range []struct{ op, name string }{{"namespace", "Namespace deletion to gone"}, {"owner", "Owner deletion to dependent gone"}} {
		for _, p99 := range []bool{false, true} {
			q := "p50"
			if p99 {
				q = "p99"
			}
			rows = append(rows, row{d.name + " " + q, func(s *systemResult, i int) float64 { return s.deletion(i, d.op, p99) }, "ms", "%.0f"})
		}
	}
	return append(rows, row{"Restart to /readyz", func(s *systemResult, i int) float64 { return s.Steps[i].RestartSeconds }, "s", "%.1f"})
}

func (r *results) markdown() string {
	var b strings.Builder
	milo, base := r.system("milo"), r.system("baseline")
	fmt.Fprintf(&b, "# Scale benchmark\n\nMachine: %s  \nCommand: `%s`  \nRun: %s – %s\n\n", r.Machine, r.Command,
		r.Started.Format(time.RFC3339), r.Finished.Format(time.RFC3339))
	b.WriteString("Each project: namespace `default`, 3 ConfigMaps of 1 KiB, 1 Secret. Milo: a Project in organization " +
		"`bench`, objects in its control plane. Baseline: Kubernetes' sample generic control plane, a namespace per project. " +
		"Both: one process with an embedded etcd, measured after a forced GC; latencies from a client on the same machine; " +
		"watch delivery with a watch open in every tenth project. Ratio = Milo / baseline.\n\n")
	b.WriteString("Controllers: ")
	for i, s := range r.Systems {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", s.Name, s.Controllers)
	}
	b.WriteString(". \"Controller\" rows are that separate process (heap in use after a forced GC, its own " +
		"informers and queues included). Every step is measured once the work queues (`workqueue_depth`, server and " +
		"controller process) are empty. Deletion: in random projects, a new namespace with 3 ConfigMaps " +
		"(baseline: a new namespace), from the DELETE's answer to the namespace's removal; a ConfigMap owning another, " +
		"from the owner's DELETE (background) to the dependent's removal; removal seen as the watch's DELETED event.\n\n")
	b.WriteString(r.bootstrapSection())
	for i, n := range r.Steps {
		fmt.Fprintf(&b, "## %d projects\n\n| | Milo | baseline | ratio |\n|---|---|---|---|\n", n)
		for _, rw := range r.rows() {
			cell := func(s *systemResult) (string, float64, bool) {
				if s == nil || i >= len(s.Steps) {
					return "–", 0, false
				}
				v := rw.value(s, i)
				if math.IsNaN(v) {
					return "–", 0, false
				}
				return fmt.Sprintf(rw.format, v) + unitSuffix(rw.unit), v, true
			}
			m, mv, mok := cell(milo)
			bs, bv, bok := cell(base)
			ratio := "–"
			if mok && bok && bv != 0 {
				ratio = fmt.Sprintf("%.2f×", mv/bv)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", rw.name, m, bs, ratio)
		}
		b.WriteString("\n")
	}
	deleted := 0
	for _, s := range r.Systems {
		deleted = max(deleted, s.Deleted)
	}
	fmt.Fprintf(&b, "## Deleting %d projects\n\n| | Milo | baseline | ratio |\n|---|---|---|---|\n", deleted)
	del := func(s *systemResult, f func(*systemResult) float64, format string) (string, float64) {
		if s == nil {
			return "–", 0
		}
		return fmt.Sprintf(format, f(s)), f(s)
	}
	for _, d := range []struct {
		name, format string
		f            func(*systemResult) float64
	}{{"Time to gone (and purged)", "%.1f s", func(s *systemResult) float64 { return s.DeleteSeconds }},
		{"Throughput", "%.0f projects/s", func(s *systemResult) float64 { return s.DeletePerSecond }}} {
		m, mv := del(milo, d.f, d.format)
		bs, bv := del(base, d.f, d.format)
		ratio := "–"
		if milo != nil && base != nil && bv != 0 {
			ratio = fmt.Sprintf("%.2f×", mv/bv)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", d.name, m, bs, ratio)
	}
	b.WriteString("\n")
	if milo != nil {
		b.WriteString(milo.noisySection(r.Steps[len(r.Steps)-1]))
	}
	if milo != nil && len(milo.Steps) > 0 {
		b.WriteString(milo.seriesSection())
	}
	if milo != nil && milo.Tracing != nil {
		b.WriteString(milo.Tracing.section())
	}
	if milo != nil && milo.Etcd != nil {
		b.WriteString(milo.Etcd.section())
	}
	if milo != nil && milo.Quota != nil {
		b.WriteString(milo.Quota.section())
	}
	if milo != nil && milo.Catalog != nil {
		b.WriteString(milo.Catalog.section())
	}
	if milo != nil && milo.CRDs != nil {
		var baseCRDs *crdResult
		if base != nil {
			baseCRDs = base.CRDs
		}
		b.WriteString(milo.CRDs.section(baseCRDs))
	}
	if milo != nil && len(milo.Service) > 0 {
		b.WriteString(serviceSection(milo.Service))
	}
	if milo != nil && len(milo.Steps) > 0 {
		b.WriteString(r.targets(milo, base))
	}
	b.WriteString("\n![Heap per project](memory-per-project.png)\n\n![p99 latency](p99-latency.png)\n")
	return b.String()
}

// bootstrapSection lists what a project holds that its creator did not create.
func (r *results) bootstrapSection() string {
	var b strings.Builder
	b.WriteString("## Bootstrap objects per project\n\nWhat the first project holds that the harness did not create " +
		"(Milo: its namespaces and what the bootstrap and controllers put in them; baseline, where the project is a " +
		"namespace the harness creates: what kube-controller-manager puts in it). Bytes: the objects encoded in " +
		"protobuf, as stored (etcd adds the key and a few bytes of envelope).\n\n| | objects | bytes | kinds |\n|---|---|---|---|\n")
	for _, s := range r.Systems {
		if s.Bootstrap == nil {
			continue
		}
		kinds := make([]string, 0, len(s.Bootstrap.Objects))
		for k, n := range s.Bootstrap.Objects {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		slices.Sort(kinds)
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", s.Name, s.Bootstrap.Count, s.Bootstrap.Bytes, strings.Join(kinds, ", "))
	}
	return b.String() + "\n"
}

func unitSuffix(unit string) string {
	if unit == "" {
		return ""
	}
	return " " + unit
}

// targets checks Milo's numbers against the goals of the design.
func (r *results) targets(milo, base *systemResult) string {
	var b strings.Builder
	last, first := len(milo.Steps)-1, 0
	n := milo.Steps[last].Projects
	check := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	b.WriteString("## Targets (Milo, at the largest step)\n\n| target | measured | |\n|---|---|---|\n")
	perProject := milo.perProject(last) / 1024
	fmt.Fprintf(&b, "| heap per project ≤ 64 KiB | %.1f KiB | %s |\n", perProject, check(perProject <= 64))
	if base != nil && len(base.Steps) > last {
		ratio := milo.perProject(last) / base.perProject(last)
		fmt.Fprintf(&b, "| heap per project ≤ 1.3× baseline | %.2f× | %s |\n", ratio, check(ratio <= 1.3))
	}
	growth := milo.Steps[last].Resources.Goroutines - milo.Steps[first].Resources.Goroutines
	fmt.Fprintf(&b, "| goroutine growth %d → %d projects ≤ 20 | %+.0f | %s |\n", milo.Steps[first].Projects, n, growth, check(growth <= 20))
	if c0, c := milo.Steps[first].Resources.Controllers, milo.Steps[last].Resources.Controllers; c0 != nil && c != nil {
		growth := c.Goroutines - c0.Goroutines
		fmt.Fprintf(&b, "| controller goroutines within ±20 from %d to %d projects | %+.0f | %s |\n", milo.Steps[first].Projects, n, growth, check(math.Abs(growth) <= 20))
		per := milo.controllerPerProject(last) / 1024
		fmt.Fprintf(&b, "| controller heap per project ≤ 4 KiB beyond the objects the controllers create (measured including their caches of those objects: an upper bound) | %.2f KiB | %s |\n", per, check(per <= 4))
	}
	for _, d := range []struct{ op, name string }{{"namespace", "namespace deletion"}, {"owner", "owner deletion to dependent gone"}} {
		if q, ok := milo.Steps[last].Deletion[d.op]; ok {
			fmt.Fprintf(&b, "| %s p99 ≤ 2 s at %d | %.0f ms | %s |\n", d.name, n, q.P99, check(q.P99 <= 2000 && milo.Steps[last].DeletionTimeouts == 0))
		}
	}
	watches := milo.Steps[last].Resources.EtcdWatches - milo.Steps[first].Resources.EtcdWatches
	fmt.Fprintf(&b, "| etcd watch streams do not grow | %+.0f | %s |\n", watches, check(watches <= 0))
	for _, op := range operations {
		a, z := milo.Steps[first].Latency[op].P99, milo.Steps[last].Latency[op].P99
		fmt.Fprintf(&b, "| %s p99 at %d ≤ 1.25× at %d | %.1f ms vs %.1f ms (%.2f×) | %s |\n", op, n, milo.Steps[first].Projects, z, a, z/a, check(z <= 1.25*a))
	}
	create := milo.Steps[last].CreatePerSecond
	fmt.Fprintf(&b, "| create ≥ 200 projects/s | %.0f/s | %s |\n", create, check(create >= 200))
	if milo.Deleted > 0 {
		tenK := 10000 / milo.DeletePerSecond
		fmt.Fprintf(&b, "| delete and purge 10,000 ≤ 120 s | %.0f s (%d deleted at %.0f/s) | %s |\n", tenK, milo.Deleted, milo.DeletePerSecond, check(tenK <= 120))
	}
	restart := milo.Steps[last].RestartSeconds
	fmt.Fprintf(&b, "| restart to ready ≤ 60 s | %.1f s with %d projects | %s |\n", restart, n, check(restart <= 60))
	for _, nr := range milo.Noisy {
		if !nr.ProjectFlows || !nr.TenantBudget { // Milo's default
			continue
		}
		idle := nr.Phases["idle"].Quiet.P99
		for _, phase := range noisyPhases[1:] {
			q := nr.Phases[phase].Quiet.P99
			fmt.Fprintf(&b, "| quiet project's GET p99 under a %s flood ≤ 2× idle (%s) | %.1f ms vs %.1f ms (%.2f×) | %s |\n", phase, nr.config(), q, idle, q/idle, check(q <= 2*idle))
		}
	}
	return b.String()
}

// noisySection reports the noisy-neighbour measurement.
func (s *systemResult) noisySection(projects int) string {
	if len(s.Noisy) == 0 || s.NoisyOptions == nil {
		return ""
	}
	o := s.NoisyOptions
	var b strings.Builder
	fmt.Fprintf(&b, "## Noisy neighbour (%d projects)\n\n", projects)
	probe := "one request after the other"
	if o.ProbeRate > 0 {
		probe = fmt.Sprintf("%d times a second, one request at a time", o.ProbeRate)
	}
	client := "One client, a process of its own (one core at most), GETs"
	if o.ProbeInProcess {
		client = "One client, in the harness's process beside the flood's, GETs"
	}
	fmt.Fprintf(&b, "%s a ConfigMap of project `%s`, %s, for %s while project `%s` floods the server: "+
		"**writes** (%d ConfigMap creates/s of 1 KiB from %d clients), **lists** (%d lists/s, from up to %d clients, of %d ConfigMaps of %d KiB without a limit), "+
		"**watches** (%d watches on one ConfigMap, updated %d times/s). Both projects are used by the same ordinary user (one identity in many "+
		"projects, which upstream's per-user flows cannot tell apart). \"Project flows\" is Milo's default (`--project-flows`: one APF flow per "+
		"project); without, the apiserver's own FlowSchemas classify. \"Tenant budget\" is Milo's default `--tenant-concurrency` (each project's requests "+
		"in flight at once) and `--tenant-cpu-share` (the part of the server's CPUs each project may use); without, both 0. RSS: the server's, "+
		"before the phase and at its peak. Collections: the server's garbage collections during the phase. Cores: the CPU the server, the controller manager and the harness (its prober too) used during the phase.\n\n",
		client, quietProject, probe, o.Phase, noisyProject, o.WriteRate, o.WriteWorkers, o.ListRate, o.ListWorkers, o.ListObjects, o.ListObjectBytes>>10, o.Watches, o.WatchedWrites)
	if w := s.Noisy[0].Phases["watches"].WatchesOpen; w > 0 && w < o.Watches {
		fmt.Fprintf(&b, "The server let the noisy project open %d of the %d watches (`--max-project-watches`).\n\n", w, o.Watches)
	}
	b.WriteString("| configuration | phase | quiet GET p50 | quiet GET p99 | p99 / idle | quiet GETs (failed) | flood ops/s (failed) | RSS before → peak | collections | cores: server / controllers / harness |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, nr := range s.Noisy {
		idle := nr.Phases["idle"].Quiet.P99
		for _, phase := range noisyPhases {
			p := nr.Phases[phase]
			fmt.Fprintf(&b, "| %s | %s | %.1f ms | %.1f ms | %.2f× | %d (%d) | %.0f (%d) | %.0f → %.0f MiB | %.0f | %.2f / %.2f / %.2f |\n", nr.config(), phase,
				p.Quiet.P50, p.Quiet.P99, p.Quiet.P99/idle, p.QuietGets, p.QuietErrors, p.NoisyOps, p.NoisyErrors, p.RSSBeforeMiB, p.RSSPeakMiB,
				p.Collections, p.ServerCores, p.ControllerCores, p.HarnessCores)
		}
	}
	return b.String() + "\n"
}

var systemColors = map[string]color.Color{"milo": color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, "baseline": color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}}

func newPlot(title, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "projects"
	p.Y.Label.Text = y
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	return p
}

func (r *results) plotMemory(path string) error {
	p := newPlot("Heap per project (after GC, objects included)", "KiB per project")
	for _, s := range r.Systems {
		if len(s.Steps) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(s.Steps))
		for i, st := range s.Steps {
			pts[i] = plotter.XY{X: float64(st.Projects), Y: s.perProject(i) / 1024}
		}
		if err := addLine(p, s.Name, pts, systemColors[s.Name], nil); err != nil {
			return err
		}
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

func (r *results) plotLatency(path string) error {
	p := newPlot("p99 latency", "ms")
	p.Y.Min = 0
	p.Legend.Left = true
	dashes := map[string][]vg.Length{"get": nil, "list": {vg.Points(6), vg.Points(3)}, "create": {vg.Points(2), vg.Points(2)},
		"update": {vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}, "watch": {vg.Points(1), vg.Points(4)}}
	for _, s := range r.Systems {
		if len(s.Steps) == 0 {
			continue
		}
		for _, op := range operations {
			pts := make(plotter.XYs, 0, len(s.Steps))
			for _, st := range s.Steps {
				pts = append(pts, plotter.XY{X: float64(st.Projects), Y: max(st.Latency[op].P99, 0.01)})
			}
			if err := addLine(p, s.Name+" "+op, pts, systemColors[s.Name], dashes[op]); err != nil {
				return err
			}
		}
	}
	return p.Save(9*vg.Inch, 6*vg.Inch, path)
}

func addLine(p *plot.Plot, name string, pts plotter.XYs, c color.Color, dashes []vg.Length) error {
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	line.Color, line.Dashes, line.Width = c, dashes, vg.Points(1.5)
	points.Color, points.Shape = c, draw.CircleGlyph{}
	p.Add(line, points)
	p.Legend.Add(name, line, points)
	return nil
}

// section reports the measurement of projects' own CRDs, beside the
// baseline's of the same objects if it ran.
func (c *crdResult) section(base *crdResult) string {
	var b strings.Builder
	o := c.Options
	fmt.Fprintf(&b, "## Projects' own CRDs\n\n%d projects each define the same %d CRDs (one schema class each) and one instance of each; then %d projects each define one CRD of a schema of its own. Heap after GC.",
		o.Projects, o.PerProject, o.Unique)
	if base != nil {
		b.WriteString(" Baseline: the platform's CRDs of the shared schemas installed once, and in each project's namespace the same objects stored — each CRD's manifest in a ConfigMap of its own, one instance of each kind; then one platform CRD per unique schema, with one instance (upstream's cost per CRD).")
	}
	b.WriteString("\n\n| | heap in use | live | goroutines | etcd watches (one per watch cache) |\n|---|---|---|---|---|\n")
	rows := func(system string, c *crdResult) {
		row := func(what string, r resources) {
			fmt.Fprintf(&b, "| %s: %s | %.0f MiB | %.0f MiB | %.0f | %.0f |\n", system, what, r.HeapBytes/(1<<20), r.HeapLiveBytes/(1<<20), r.Goroutines, r.EtcdWatches)
		}
		o := c.Options
		row("before", c.Before)
		if half := o.Projects / 2; half > 0 && c.Half.HeapBytes > 0 {
			row(fmt.Sprintf("%d projects × %d shared CRDs", half, o.PerProject), c.Half)
		}
		row(fmt.Sprintf("%d projects × %d shared CRDs", o.Projects, o.PerProject), c.Shared)
		if o.Unique > 0 {
			row(fmt.Sprintf("+ %d unique schemas", o.Unique), c.Unique)
		}
	}
	rows("milo", c)
	if base != nil {
		rows("baseline", base)
	}
	b.WriteString("\n")
	lines := func(system string, c *crdResult) {
		o := c.Options
		half := o.Projects / 2
		fmt.Fprintf(&b, "- %s, shared: %.2f KiB in use and %.2f KiB live per project (%d CRDs and instances each), %.0f CRDs/s with their instances.",
			system, (c.Shared.HeapBytes-c.Before.HeapBytes)/1024/float64(max(1, o.Projects)), (c.Shared.HeapLiveBytes-c.Before.HeapLiveBytes)/1024/float64(max(1, o.Projects)),
			o.PerProject, c.SharedPerSecond)
		if half > 0 && c.Half.HeapBytes > 0 {
			fmt.Fprintf(&b, " Each project past the first %d: %.2f KiB in use and %.2f KiB live (what the first fill once — admission pools, buffers, etcd's raft log — left out).",
				half, (c.Shared.HeapBytes-c.Half.HeapBytes)/1024/float64(o.Projects-half), (c.Shared.HeapLiveBytes-c.Half.HeapLiveBytes)/1024/float64(o.Projects-half))
		}
		if o.Unique > 0 {
			fmt.Fprintf(&b, " Unique: %.1f KiB in use, %.1f KiB live, %.1f goroutines and %.2f etcd watches per distinct schema, %.0f CRDs/s.",
				(c.Unique.HeapBytes-c.Shared.HeapBytes)/1024/float64(o.Unique), (c.Unique.HeapLiveBytes-c.Shared.HeapLiveBytes)/1024/float64(o.Unique),
				(c.Unique.Goroutines-c.Shared.Goroutines)/float64(o.Unique), (c.Unique.EtcdWatches-c.Shared.EtcdWatches)/float64(o.Unique), c.UniquePerSecond)
		}
		if c.Established.P50 > 0 {
			fmt.Fprintf(&b, " Create → Established p50 %.0f ms, p99 %.0f ms.", c.Established.P50, c.Established.P99)
		}
		b.WriteString("\n")
	}
	lines("milo", c)
	if base != nil {
		lines("baseline", base)
		if half := o.Projects / 2; half > 0 && c.Half.HeapBytes > 0 && base.Half.HeapBytes > 0 {
			per := func(c *crdResult) float64 {
				return (c.Shared.HeapLiveBytes - c.Half.HeapLiveBytes) / 1024 / float64(o.Projects-half)
			}
			fmt.Fprintf(&b, "- Beyond the stored objects (live per project past the first %d, Milo − baseline): %.2f KiB.\n", half, per(c)-per(base))
		}
	}
	b.WriteString("\n")
	return b.String()
}

// serviceSection reports the sample service at each step: its heap after GC
// and goroutines, the heap it added per project since the first step, and
// Widgets from create to Ready.
func serviceSection(steps []serviceStep) string {
	var b strings.Builder
	b.WriteString("## The sample service\n\nOne Widget per project, reconciled into a ConfigMap; the service caches every project's Widgets and ConfigMaps. Heap: in use and live (allocated) after a forced GC; per project: the growth since the provider's first step, divided by the projects added. Create → Ready: Widgets timed one at a time, once the service's, the server's and the controllers' work queues are empty; the server's garbage collections over that time are counted. The naive provider (a cluster per project) is started on the same projects after the service is stopped; its \"engaged in\" is the time from its start to every project engaged.\n\n")
	var providers []string
	for _, st := range steps {
		if !slices.Contains(providers, st.Provider) {
			providers = append(providers, st.Provider)
		}
	}
	for _, provider := range providers {
		fmt.Fprintf(&b, "### %s provider\n\n", provider)
		b.WriteString("| projects | heap in use | live | live per project | goroutines | create → Ready p50 | p99 | server collections while timed | widgets/s | engaged in |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		var first *serviceStep
		for i := range steps {
			st := steps[i]
			if st.Provider != provider {
				continue
			}
			per := "–"
			if first == nil {
				first = &steps[i]
			} else if st.Projects > first.Projects {
				per = fmt.Sprintf("%.2f KiB", (st.HeapLiveBytes-first.HeapLiveBytes)/1024/float64(st.Projects-first.Projects))
			}
			engaged := "–"
			if st.Engaged > 0 {
				engaged = fmt.Sprintf("%.1f s", st.ReadyWaitSeconds)
			}
			collections := "–"
			if st.SamplingSeconds > 0 && st.ServerCollections >= 0 {
				collections = fmt.Sprintf("%.0f in %.0f s", st.ServerCollections, st.SamplingSeconds)
			}
			fmt.Fprintf(&b, "| %d | %.1f MiB | %.1f MiB | %s | %.0f | %.0f ms | %.0f ms | %s | %.0f | %s |\n", st.Projects, st.HeapBytes/(1<<20), st.HeapLiveBytes/(1<<20), per, st.Goroutines, st.Ready.P50, st.Ready.P99, collections, st.WidgetsPerSecond, engaged)
		}
		b.WriteString("\nCreate → Ready split where the harness sees it (p50 / p99): the create's answer; from it to the Widget's ConfigMap seen (the service saw the Widget and acted); from that to Ready seen (the service's status write); a sample whose Ready was seen before its ConfigMap counts its whole time after the create in → ConfigMap (raced). What stalled the embedded etcd's writes meanwhile: walks of its in-memory key index (a compaction's first step, over every key) and their time, compaction batches (each holds etcd's write lock and commits) and their pauses' sum, WAL fsyncs and backend commits over 32 ms.\n\n| projects | create | → ConfigMap | → Ready | raced | etcd index walks | etcd compaction batches | fsyncs / commits > 32 ms |\n|---|---|---|---|---|---|---|---|\n")
		for _, st := range steps {
			if st.Provider == provider && st.Create.P50 > 0 {
				walks, compaction, slow := "–", "–", "–"
				if e := st.Etcd; e != nil {
					walks = fmt.Sprintf("%.0f (%.0f ms)", e.IndexWalks, e.IndexWalkMs)
					compaction = fmt.Sprintf("%.0f (%.0f ms)", e.CompactionBatches, e.CompactionPauseMs)
					slow = fmt.Sprintf("%.0f / %.0f", e.SlowFsyncs, e.SlowCommits)
				}
				fmt.Fprintf(&b, "| %d | %.1f / %.1f ms | %.1f / %.1f ms | %.1f / %.1f ms | %d | %s | %s | %s |\n", st.Projects, st.Create.P50, st.Create.P99, st.ToConfigMap.P50, st.ToConfigMap.P99, st.ToReady.P50, st.ToReady.P99, st.Raced, walks, compaction, slow)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// createCPU is the CPU one process (0 server, 1 controller process, 2 the
// harness) used per project created at step i, or NaN where not measured.
func (s *systemResult) createCPU(i, process int) float64 {
	c := s.Steps[i].CreateCPU
	if c == nil || (process == 1 && s.Steps[i].Resources.Controllers == nil) {
		return math.NaN()
	}
	return c[process]
}
