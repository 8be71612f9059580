package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// tracingResult is request latency with tracing off, on at sampling 0, and
// on at 1% (Milo, at the last step), and the spans the receiver got.
type tracingResult struct {
	Projects int
	// Latency by configuration ("off", "sampling 0", "sampling 1%"), then by operation.
	Latency map[string]map[string]quantiles
	Spans   int64
}

// tracingConfigs are measured in this order.
var tracingConfigs = []struct {
	name       string
	perMillion int
}{{"off", -1}, {"sampling 0", 0}, {"sampling 1%", 10000}}

// spanCounter is an OTLP receiver that counts what it gets.
type spanCounter struct {
	coltracepb.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (c *spanCounter) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			c.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// measureTracing restarts Milo with each tracing configuration, exporting to a
// receiver on loopback, and times the same operations as every step.
func measureTracing(ctx context.Context, s *system, projects, samples int, dir string, drainTimeout time.Duration) (*tracingResult, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	receiver := &spanCounter{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, receiver)
	go srv.Serve(lis) //nolint:errcheck
	defer srv.Stop()
	defer func() { s.extraArgs = nil }()

	r := &tracingResult{Projects: projects, Latency: map[string]map[string]quantiles{}}
	for _, c := range tracingConfigs {
		s.extraArgs = nil
		if c.perMillion >= 0 {
			file := filepath.Join(dir, fmt.Sprintf("tracing-%d.yaml", c.perMillion))
			if err := os.WriteFile(file, []byte(fmt.Sprintf("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: %s\nsamplingRatePerMillion: %d\n", lis.Addr(), c.perMillion)), 0o600); err != nil {
				return nil, err
			}
			s.extraArgs = []string{"--tracing-config-file", file}
		}
		if _, err := s.restart(ctx); err != nil {
			return nil, err
		}
		// A restarted server's controllers go through every object again
		// first: measured once they are done, as every step is.
		if s.hasControllers() {
			if _, _, err := s.waitDrained(ctx, drainTimeout); err != nil {
				return nil, err
			}
		}
		// The same samples in every configuration.
		lat, err := measureLatency(ctx, s, projects, samples, rand.New(rand.NewPCG(3, 4)))
		if err != nil {
			return nil, err
		}
		r.Latency[c.name] = map[string]quantiles{}
		for op, l := range lat {
			r.Latency[c.name][op] = quantiles{P50: ms(l.quantile(0.5)), P99: ms(l.quantile(0.99))}
		}
		progress("[milo] tracing %s: get p50 %.2f / p99 %.2f ms, create p50 %.2f / p99 %.2f ms", c.name,
			r.Latency[c.name]["get"].P50, r.Latency[c.name]["get"].P99, r.Latency[c.name]["create"].P50, r.Latency[c.name]["create"].P99)
	}
	r.Spans = receiver.spans.Load()
	// Back to the configuration of every other measurement.
	if _, err := s.restart(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (t *tracingResult) section() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Tracing cost\n\nAt %d projects, the same ConfigMap operations timed with tracing off, on at sampling 0 (every request span is made, none exported) and on at 1%% (exported to an OTLP receiver on loopback; %d spans received). Ratios against tracing off.\n\n", t.Projects, t.Spans)
	b.WriteString("| operation | off p50 / p99 (ms) | sampling 0 p50 / p99 | ratio | sampling 1% p50 / p99 | ratio |\n|---|---|---|---|---|---|\n")
	off := t.Latency["off"]
	for _, op := range []string{"get", "list", "create", "update"} {
		z, one := t.Latency["sampling 0"][op], t.Latency["sampling 1%"][op]
		fmt.Fprintf(&b, "| %s | %.2f / %.2f | %.2f / %.2f | %.2f× / %.2f× | %.2f / %.2f | %.2f× / %.2f× |\n", op,
			off[op].P50, off[op].P99, z.P50, z.P99, z.P50/off[op].P50, z.P99/off[op].P99, one.P50, one.P99, one.P50/off[op].P50, one.P99/off[op].P99)
	}
	b.WriteString("\n")
	return b.String()
}

// etcdLeases counts the leases in Milo's embedded etcd: Events' TTLs, which
// the apiserver shares among the Events written within a minute. On another
// storage (kine) it counts nothing.
func (s *system) etcdLeases(ctx context.Context) (float64, error) {
	client, _, err := s.embeddedEtcd()
	if err != nil || client == nil {
		return 0, err
	}
	defer client.Close()
	leases, err := client.Leases(ctx)
	if err != nil {
		return 0, err
	}
	return float64(len(leases.Leases)), nil
}

// seriesSection reports the server's /metrics series at each step.
func (s *systemResult) seriesSection() string {
	var b strings.Builder
	b.WriteString("## Metric series and Event leases\n\nSeries on the server's `/metrics` (every sample line) when each step is measured, and once the server restarted at the end of the step has caught up (the same history at every step: what grows there is what projects add); Milo's own (`milo_*`); the etcd leases Events hold.\n\n| projects | series | after the restart | ratio to the first step | milo_* series | etcd leases |\n|---|---|---|---|---|---|\n")
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.3f× | %.0f | %.0f |\n", st.Projects, st.Resources.Series, st.SeriesAfterRestart,
			st.SeriesAfterRestart/s.Steps[0].SeriesAfterRestart, st.Resources.MiloSeries, st.Resources.EtcdLeases)
	}
	b.WriteString("\n")
	return b.String()
}

// series counts /metrics' sample lines, keeping the exposition in file.
func (s *system) series(ctx context.Context, file string) (float64, error) {
	body, err := s.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(file, body, 0o644); err != nil {
		return 0, err
	}
	return float64(len(parseMetrics(string(body)))), nil
}
