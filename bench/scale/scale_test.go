package main

import (
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary be the harness's prober process too.
func TestMain(m *testing.M) {
	if runProbeIfAsked() {
		return
	}
	os.Exit(m.Run())
}

// TestSmoke runs the harness as `--smoke` does, on both systems up to 1,000
// projects, and checks that it measured everything and wrote its report. The
// numbers themselves are read from a full run's report, not asserted here.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two servers and creates 1,000 projects in each")
	}
	out := t.TempDir()
	res, err := run(context.Background(), options{Max: 1000, Steps: []int{100, 1000, 10000}, Out: out, Systems: []string{"milo", "baseline"},
		Workers: 32, LatencySamples: 50, WatchSamples: 20, Delete: 300, Repo: filepath.Join("..", ".."),
		BaselineControllers: true, MiloControllers: "separate", DeletionSamples: 8,
		Noisy: true, NoisyOptions: defaultNoisyOptions(true), Tracing: true, EtcdMaintenance: true, Quota: quotaOptions{Projects: 200, Created: 200, Samples: 50}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Systems) != 2 {
		t.Fatalf("measured %d systems", len(res.Systems))
	}
	for _, s := range res.Systems {
		if q := s.Quota; s.Name == "milo" && (q == nil || q.CreateOff.P50 <= 0 || q.CreateCharged.P50 <= 0 || q.Granted.HeapBytes <= 0 || q.ProjectsPerSecondOn <= 0) {
			t.Errorf("milo: quotas not measured: %+v", q)
		}
		if tr := s.Tracing; s.Name == "milo" && (tr == nil || len(tr.Latency) != 3 || tr.Latency["sampling 1%"]["get"].P50 <= 0 || tr.Latency["off"]["create"].P50 <= 0) {
			t.Errorf("milo: tracing cost not measured: %+v", tr)
		}
		if s.Name == "milo" {
			for _, st := range s.Steps {
				if st.Resources.Series <= 0 || st.Resources.MiloSeries <= 0 || st.Resources.EtcdLeases <= 0 || st.SeriesAfterRestart <= 0 {
					t.Errorf("milo at %d: series %.0f, milo series %.0f, etcd leases %.0f", st.Projects, st.Resources.Series, st.Resources.MiloSeries, st.Resources.EtcdLeases)
				}
			}
		}
		if len(s.Steps) != 2 || s.Steps[0].Projects != 100 || s.Steps[1].Projects != 1000 {
			t.Fatalf("%s: steps %+v, want 100 and 1,000 (10,000 is above --max)", s.Name, s.Steps)
		}
		for _, st := range s.Steps {
			if st.Resources.HeapBytes <= 0 || st.Resources.RSSBytes <= 0 || st.Resources.Goroutines <= 0 || st.CreatePerSecond <= 0 || st.RestartSeconds <= 0 {
				t.Errorf("%s at %d: missing measurements %+v", s.Name, st.Projects, st)
			}
			for _, op := range operations {
				if q := st.Latency[op]; q.P50 <= 0 || q.P99 < q.P50 {
					t.Errorf("%s at %d: %s latency %+v", s.Name, st.Projects, op, q)
				}
			}
			if c := st.Resources.Controllers; c == nil || c.HeapBytes <= 0 || c.Goroutines <= 0 || c.RSSBytes <= 0 {
				t.Errorf("%s at %d: controller process not measured: %+v", s.Name, st.Projects, c)
			}
			for _, op := range []string{"namespace", "owner"} {
				if q := st.Deletion[op]; q.P50 <= 0 || q.P99 < q.P50 {
					t.Errorf("%s at %d: %s deletion latency %+v", s.Name, st.Projects, op, q)
				}
			}
			if st.DeletionTimeouts != 0 || !st.Drained {
				t.Errorf("%s at %d: %d deletions timed out, queues drained: %v", s.Name, st.Projects, st.DeletionTimeouts, st.Drained)
			}
			if st.WatchesOpen != st.Projects/10 {
				t.Errorf("%s at %d: %d watches open, want one in every tenth project", s.Name, st.Projects, st.WatchesOpen)
			}
		}
		if s.Bootstrap == nil || s.Bootstrap.Count == 0 || s.Bootstrap.Bytes == 0 {
			t.Errorf("%s: bootstrap objects not counted: %+v", s.Name, s.Bootstrap)
		}
		if s.Deleted != 300 || s.DeletePerSecond <= 0 {
			t.Errorf("%s: no deletion measured", s.Name)
		}
	}
	// etcd counted, compacted and defragmented at the last step.
	if e := res.system("milo").Etcd; e == nil || e.Keys == 0 || e.InUseCompacted <= 0 || e.DBDefragmented <= 0 || e.DefragSeconds <= 0 {
		t.Errorf("etcd's maintenance measured %+v", e)
	}
	// The noisy neighbour: Milo with project flows and the CPU budget, with
	// flows only, and with neither, every phase.
	milo := res.system("milo")
	if len(milo.Noisy) != len(noisyConfigs) || !milo.Noisy[0].ProjectFlows || !milo.Noisy[0].TenantBudget ||
		milo.Noisy[1].TenantBudget || milo.Noisy[2].ProjectFlows {
		t.Fatalf("noisy neighbour measured %+v, want with flows and budget, with flows only, with neither", milo.Noisy)
	}
	for _, nr := range milo.Noisy {
		for _, phase := range noisyPhases {
			p := nr.Phases[phase]
			if p.QuietGets == 0 || p.Quiet.P50 <= 0 || p.Quiet.P99 < p.Quiet.P50 || p.RSSPeakMiB <= 0 || (phase != "idle" && p.NoisyOps <= 0) {
				t.Errorf("noisy neighbour, %s, %s: %+v", nr.config(), phase, p)
			}
		}
	}

	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## 100 projects", "## 1000 projects", "| Heap per project |", "| Watch p99 |", "| Controller heap per project |", "| Namespace deletion to gone p99 |",
		"| Owner deletion to dependent gone p99 |", "## Bootstrap objects per project", "## Deleting 300 projects", "## Noisy neighbour (1000 projects)", "## Targets"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back results
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Systems) != 2 {
		t.Fatalf("results.json: %v", err)
	}
	for _, name := range []string{"memory-per-project.png", "p99-latency.png"} {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil || cfg.Width < 400 {
			t.Errorf("%s: %v %+v", name, err, cfg)
		}
	}
}
