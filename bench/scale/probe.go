package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// The quiet project's client runs as a process of its own (one core at
// most): a tenant's client is not in the same Go runtime as another
// tenant's flood. In the harness's own process the probe's goroutine
// queued behind the flood's 32 clients for the harness's cores, and what
// it measured was partly the harness.

// probeEnv, when set, makes this binary the prober: the value is a probeSpec.
const probeEnv = "MILO_BENCH_PROBE"

// probeSpec is what the prober GETs, how often and for how long.
type probeSpec struct {
	Host, Token, CAFile string
	CAData              []byte
	Namespace, Name     string
	Rate                int
	For                 time.Duration
}

// probeResult is the prober's answer on its standard output.
type probeResult struct {
	Latencies latencies
	Errors    int
}

// runProbeIfAsked runs the prober and reports true when this process is one.
func runProbeIfAsked() bool {
	raw := os.Getenv(probeEnv)
	if raw == "" {
		return false
	}
	var spec probeSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(2)
	}
	out, err := probe(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
	return true
}

func probe(spec probeSpec) (probeResult, error) {
	var out probeResult
	cfg := &rest.Config{Host: spec.Host, BearerToken: spec.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: spec.CAFile, CAData: spec.CAData}, QPS: -1, Burst: -1, Timeout: time.Minute}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return out, err
	}
	get := c.CoreV1().ConfigMaps(spec.Namespace)
	ctx, cancel := context.WithTimeout(context.Background(), spec.For)
	defer cancel()
	// One untimed GET opens the connection.
	if _, err := get.Get(ctx, spec.Name, metav1.GetOptions{}); err != nil {
		return out, err
	}
	out.Latencies, out.Errors = paced(ctx, spec.Rate, func(ctx context.Context) error {
		_, err := get.Get(ctx, spec.Name, metav1.GetOptions{})
		return err
	})
	return out, nil
}

// paced calls get rate times a second (back to back with rate 0), one
// call at a time, until ctx ends, and returns the latencies of the calls
// that succeeded and how many failed; a call cut short by ctx is neither.
func paced(ctx context.Context, rate int, get func(context.Context) error) (latencies, int) {
	var out latencies
	failed := 0
	var pace <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		pace = t.C
	}
	for ctx.Err() == nil {
		if pace != nil {
			select {
			case <-pace:
			case <-ctx.Done():
				continue
			}
		}
		t := time.Now()
		err := get(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			failed++
			continue
		}
		out = append(out, time.Since(t))
	}
	return out, failed
}

// probeApart runs the prober as a child process for d: the quiet project's
// GETs of its ConfigMap cm-0, at o.ProbeRate. It returns the latencies, the
// failed GETs and the CPU seconds the prober used.
func (s *system) probeApart(ctx context.Context, o noisyOptions, d time.Duration) (latencies, int, float64, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, 0, 0, err
	}
	spec, err := json.Marshal(probeSpec{Host: strings.TrimSuffix(s.user.Host, "/") + tenancy.ProjectPath(quietProject), Token: s.user.BearerToken,
		CAFile: s.user.CAFile, CAData: s.user.CAData, Namespace: s.namespaceOf(quietProject), Name: "cm-0", Rate: o.ProbeRate, For: d})
	if err != nil {
		return nil, 0, 0, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), probeEnv+"="+string(spec), "GOMAXPROCS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, 0, 0, fmt.Errorf("the quiet project's prober: %w: %s", err, stderr.String())
	}
	var r probeResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, 0, 0, fmt.Errorf("the quiet project's prober said %q: %w", stdout.String(), err)
	}
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return r.Latencies, r.Errors, cpu, nil
}
