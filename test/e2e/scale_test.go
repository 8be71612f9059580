package e2e

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// metricSum adds up every sample of a metric whose labels contain all of labels.
func (m *milo) metricSum(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	body, err := m.kube(t.(*testing.T)).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
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
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// settledGoroutines forces a GC (through the profiling endpoint) and returns the
// lowest goroutine count seen over a short window, so that goroutines of requests
// still finishing do not count.
func (m *milo) settledGoroutines(t *testing.T) (goroutines, heap float64) {
	t.Helper()
	if _, err := m.kube(t).CoreV1().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(context.Background()); err != nil {
		t.Fatalf("forcing GC: %v", err)
	}
	goroutines = m.metricSum(t, "go_goroutines")
	for range 10 {
		time.Sleep(200 * time.Millisecond)
		goroutines = min(goroutines, m.metricSum(t, "go_goroutines"))
	}
	return goroutines, m.metricSum(t, "go_memstats_heap_inuse_bytes")
}

// TestThousandProjectsCostNoGoroutinesOrWatches is the scale proof of the storage
// design: 1,000 projects, each with a namespace and a ConfigMap written through its
// own URL, add no goroutines and no etcd watches to the server.
func TestThousandProjectsCostNoGoroutinesOrWatches(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 1,000 projects")
	}
	m := shared
	const projects = 1000
	etcdWatchesBefore := m.metricSum(t, "grpc_client_started_total", `grpc_method="Watch"`)
	goroutinesBefore, heapBefore := m.settledGoroutines(t)

	start := time.Now()
	work := make(chan int)
	errs := make(chan error, projects)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("scale-%04d", i)
				if err := m.tryCreateProject(t, name); err != nil {
					errs <- err
					continue
				}
				c := m.projectKube(t, name)
				ctx := context.Background()
				if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
					errs <- err
					continue
				}
				if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: "config"}, Data: map[string]string{"project": name}}, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range projects {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)

	goroutinesAfter, heapAfter := m.settledGoroutines(t)
	etcdWatchesAfter := m.metricSum(t, "grpc_client_started_total", `grpc_method="Watch"`)
	t.Logf("%d projects with a namespace and a configmap each in %s (%.0f projects/s)", projects, elapsed.Round(time.Millisecond), projects/elapsed.Seconds())
	t.Logf("goroutines %.0f -> %.0f; etcd watch streams started %.0f -> %.0f; heap in use %.1f MiB -> %.1f MiB (%.0f bytes per project, objects included)",
		goroutinesBefore, goroutinesAfter, etcdWatchesBefore, etcdWatchesAfter, heapBefore/(1<<20), heapAfter/(1<<20), (heapAfter-heapBefore)/projects)

	if goroutinesAfter-goroutinesBefore > 20 {
		t.Errorf("goroutines grew by %.0f for %d projects, want at most 20", goroutinesAfter-goroutinesBefore, projects)
	}
	if etcdWatchesAfter != etcdWatchesBefore {
		t.Errorf("etcd watch streams grew from %.0f to %.0f", etcdWatchesBefore, etcdWatchesAfter)
	}
	// Every project still sees exactly its own object.
	for _, i := range []int{0, projects / 2, projects - 1} {
		name := fmt.Sprintf("scale-%04d", i)
		list, err := m.projectKube(t, name).CoreV1().ConfigMaps("").List(context.Background(), metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 || list.Items[0].Data["project"] != name {
			t.Fatalf("%s lists %v %v", name, list, err)
		}
	}
}
