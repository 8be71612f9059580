package telemetry

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkTopProjectsCount is the cost the heaviest-projects tracker adds to
// each request, with requests spread over 100,000 projects (every request a
// project the counters may not hold: the worst case) and with one hot
// project; it reports the tracker's heap after counting.
func BenchmarkTopProjectsCount(b *testing.B) {
	names := make([]string, 100_000)
	for i := range names {
		names[i] = fmt.Sprintf("project-%06d", i)
	}
	for _, bc := range []struct {
		name string
		next func(i int) string
	}{
		{"100000-projects-round-robin", func(i int) string { return names[i%len(names)] }},
		{"one-hot-project", func(i int) string {
			if i%2 == 0 {
				return names[0]
			}
			return names[i%len(names)]
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			top := NewTopProjects(20, time.Hour)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				top.Count(bc.next(i))
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc)-float64(before.HeapAlloc), "tracker-heap-bytes")
			runtime.KeepAlive(top)
		})
	}
}
