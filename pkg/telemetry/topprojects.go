package telemetry

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
)

// TopProjects names the heaviest projects for noisy-neighbour diagnosis: the
// N projects with the most requests over a window, and the N storing the most
// objects at the last count. Its memory is fixed by N, never by the number of
// projects: requests are counted with the space-saving algorithm over 10·N
// counters, and the stored-object count keeps only its top N. Projects are
// ranked by the requests they certainly made (a counter's count less the
// count it inherited), so a project that took over a counter a moment ago is
// not reported as heavy. As metrics, it is at most 2·N series at a time.
type TopProjects struct {
	n      int
	window time.Duration
	now    func() time.Time

	mu       sync.Mutex
	started  time.Time
	counting *spaceSaving
	last     []Heavy // the top N of the last complete window
	lastEnd  time.Time

	storedMu sync.Mutex
	stored   []Heavy
	storedAt time.Time
}

// Heavy is one project in a top-N list.
type Heavy struct {
	Project string `json:"project"`
	// Value is the requests per second the project certainly made over the
	// window, or the objects it stores.
	Value float64 `json:"value"`
	// Error is how many more requests per second it may have made
	// (space-saving's bound); 0 for stored objects.
	Error float64 `json:"error,omitempty"`
}

// NewTopProjects tracks the top n projects over windows of the given length.
func NewTopProjects(n int, window time.Duration) *TopProjects {
	t := &TopProjects{n: n, window: window, now: time.Now}
	t.started = t.now()
	t.counting = newSpaceSaving(10 * n)
	return t
}

// Count counts one request of project.
func (t *TopProjects) Count(project string) {
	if t == nil || t.n <= 0 {
		return
	}
	t.mu.Lock()
	t.rotateLocked()
	t.counting.add(project)
	t.mu.Unlock()
}

// rotateLocked closes the window once it has passed: its top N becomes the
// reported one. No timer: the next request (or report) rotates.
func (t *TopProjects) rotateLocked() {
	now := t.now()
	elapsed := now.Sub(t.started)
	if elapsed < t.window {
		return
	}
	if elapsed < 2*t.window {
		// The window just closed: report it. After a longer silence, the
		// last complete window was empty.
		t.last = t.counting.top(t.n, t.window.Seconds())
	} else {
		t.last = nil
	}
	t.lastEnd = t.started.Add(t.window * (elapsed / t.window))
	t.started = t.lastEnd
	t.counting.reset()
}

// Requests returns the top N projects by requests per second in the last
// complete window, and when that window ended.
func (t *TopProjects) Requests() ([]Heavy, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rotateLocked()
	return slices.Clone(t.last), t.lastEnd
}

// SetStored records a new count of stored objects by project (as many
// projects as counted: only the top N are kept).
func (t *TopProjects) SetStored(counts map[string]int64, at time.Time) {
	top := largest(counts, t.n)
	t.storedMu.Lock()
	t.stored, t.storedAt = top, at
	t.storedMu.Unlock()
}

// Stored returns the top N projects by stored objects and when they were counted.
func (t *TopProjects) Stored() ([]Heavy, time.Time) {
	t.storedMu.Lock()
	defer t.storedMu.Unlock()
	return slices.Clone(t.stored), t.storedAt
}

// CountStoredEvery runs count every interval until ctx ends, recording its
// result: one goroutine for the server, however many projects.
func (t *TopProjects) CountStoredEvery(ctx context.Context, interval time.Duration, count func(context.Context) (map[string]int64, error)) {
	if interval <= 0 || t.n <= 0 {
		return
	}
	// The first count waits a minute: a server restarting under load has
	// better things to do.
	timer := time.NewTimer(min(interval, time.Minute))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := t.now()
		counts, err := count(ctx)
		if err != nil {
			if ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Counting the objects projects store")
			}
		} else {
			t.SetStored(counts, start)
			klog.FromContext(ctx).V(2).Info("Counted the objects projects store", "took", t.now().Sub(start), "largest", len(counts))
		}
		timer.Reset(interval)
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Report is the readable form of the heaviest projects.
type Report struct {
	Window          string    `json:"window"`
	RequestsUntil   time.Time `json:"requestsUntil,omitzero"`
	ByRequestRate   []Heavy   `json:"byRequestRate"`
	StoredCountedAt time.Time `json:"storedCountedAt,omitzero"`
	ByStoredObjects []Heavy   `json:"byStoredObjects"`
}

// Report returns the current report.
func (t *TopProjects) Report() Report {
	r := Report{Window: t.window.String()}
	r.ByRequestRate, r.RequestsUntil = t.Requests()
	r.ByStoredObjects, r.StoredCountedAt = t.Stored()
	return r
}

// ServeHTTP answers the report: JSON, or a table with ?format=table.
func (t *TopProjects) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r := t.Report()
	if req.URL.Query().Get("format") == "table" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		WriteTable(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(r)
}

// WriteTable writes a report as two tables.
func WriteTable(w interface{ Write([]byte) (int, error) }, r Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	until := "no complete window yet"
	if !r.RequestsUntil.IsZero() {
		until = "until " + r.RequestsUntil.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(tw, "BY REQUEST RATE (window %s, %s)\nRANK\tPROJECT\tREQUESTS/S (AT LEAST)\tAT MOST THIS MANY MORE\n", r.Window, until)
	for i, h := range r.ByRequestRate {
		fmt.Fprintf(tw, "%d\t%s\t%.2f\t%.2f\n", i+1, h.Project, h.Value, h.Error)
	}
	counted := "not counted yet"
	if !r.StoredCountedAt.IsZero() {
		counted = "counted " + r.StoredCountedAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(tw, "\nBY STORED OBJECTS (%s)\nRANK\tPROJECT\tOBJECTS\n", counted)
	for i, h := range r.ByStoredObjects {
		fmt.Fprintf(tw, "%d\t%s\t%.0f\n", i+1, h.Project, h.Value)
	}
	_ = tw.Flush()
}

var (
	topRequestsDesc = metrics.NewDesc("milo_top_project_requests_per_second",
		"The heaviest projects by the requests per second they certainly made over the last complete window: at most --top-projects series, labelled by project.",
		[]string{"project"}, nil, metrics.ALPHA, "")
	topStoredDesc = metrics.NewDesc("milo_top_project_stored_objects",
		"The projects storing the most objects at the last count: at most --top-projects series, labelled by project.",
		[]string{"project"}, nil, metrics.ALPHA, "")
)

// Collector returns the top N lists as metrics.
func (t *TopProjects) Collector() metrics.StableCollector { return &topCollector{t: t} }

type topCollector struct {
	metrics.BaseStableCollector
	t *TopProjects
}

func (c *topCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- topRequestsDesc
	ch <- topStoredDesc
}

func (c *topCollector) CollectWithStability(ch chan<- metrics.Metric) {
	requests, _ := c.t.Requests()
	for _, h := range requests {
		ch <- metrics.NewLazyConstMetric(topRequestsDesc, metrics.GaugeValue, h.Value, h.Project)
	}
	stored, _ := c.t.Stored()
	for _, h := range stored {
		ch <- metrics.NewLazyConstMetric(topStoredDesc, metrics.GaugeValue, h.Value, h.Project)
	}
}

// spaceSaving counts the most frequent keys of a stream in fixed memory
// (Metwally et al.): capacity counters; a new key when all are taken replaces
// the smallest and inherits its count, which becomes its error bound.
type spaceSaving struct {
	capacity int
	byKey    map[string]*counter
	heap     counterHeap // smallest count first
}

type counter struct {
	key          string
	count, error int64
	index        int
}

func newSpaceSaving(capacity int) *spaceSaving {
	return &spaceSaving{capacity: max(capacity, 1), byKey: make(map[string]*counter, capacity)}
}

func (s *spaceSaving) add(key string) {
	if c, ok := s.byKey[key]; ok {
		c.count++
		heap.Fix(&s.heap, c.index)
		return
	}
	if len(s.heap) < s.capacity {
		c := &counter{key: key, count: 1}
		s.byKey[key] = c
		heap.Push(&s.heap, c)
		return
	}
	c := s.heap[0]
	delete(s.byKey, c.key)
	c.key, c.error = key, c.count
	c.count++
	s.byKey[key] = c
	heap.Fix(&s.heap, 0)
}

func (s *spaceSaving) reset() {
	clear(s.byKey)
	s.heap = s.heap[:0]
}

// top returns the n keys with the largest certain counts (count less
// error), as rates over seconds.
func (s *spaceSaving) top(n int, seconds float64) []Heavy {
	all := slices.Clone(s.heap)
	slices.SortFunc(all, func(a, b *counter) int {
		if ca, cb := a.count-a.error, b.count-b.error; ca != cb {
			if ca > cb {
				return -1
			}
			return 1
		}
		return compareStrings(a.key, b.key)
	})
	if len(all) > n {
		all = all[:n]
	}
	out := make([]Heavy, 0, len(all))
	for _, c := range all {
		out = append(out, Heavy{Project: c.key, Value: float64(c.count-c.error) / seconds, Error: float64(c.error) / seconds})
	}
	return out
}

type counterHeap []*counter

func (h counterHeap) Len() int           { return len(h) }
func (h counterHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h counterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *counterHeap) Push(x any) {
	c := x.(*counter)
	c.index = len(*h)
	*h = append(*h, c)
}
func (h *counterHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// TopOptions size the heaviest-tenants report.
type TopOptions struct {
	// N is how many projects each list names; 0 turns the report off.
	N int
	// Window is what request rates are counted over.
	Window time.Duration
	// StoredInterval is how often stored objects are counted; 0 never.
	StoredInterval time.Duration
}

// DefaultTopOptions: the top 20, over a minute, stored objects every ten minutes.
var DefaultTopOptions = TopOptions{N: 20, Window: time.Minute, StoredInterval: 10 * time.Minute}

// Validate checks the options.
func (o TopOptions) Validate() []error {
	var errs []error
	if o.N < 0 || o.N > 1000 {
		errs = append(errs, fmt.Errorf("--top-projects %d must be between 0 and 1000", o.N))
	}
	if o.N > 0 && o.Window < time.Second {
		errs = append(errs, fmt.Errorf("--top-projects-window %s must be at least a second", o.Window))
	}
	if o.StoredInterval < 0 {
		errs = append(errs, fmt.Errorf("--top-projects-count-interval must not be negative"))
	}
	return errs
}

// Largest returns the n entries of counts with the largest values (ties by key).
func Largest(counts map[string]int64, n int) map[string]int64 {
	out := make(map[string]int64, min(n, len(counts)))
	for _, h := range largest(counts, n) {
		out[h.Project] = int64(h.Value)
	}
	return out
}

// largest returns the n entries of counts with the largest values, largest
// first (ties by key).
func largest(counts map[string]int64, n int) []Heavy {
	all := make([]Heavy, 0, len(counts))
	for k, v := range counts {
		all = append(all, Heavy{Project: k, Value: float64(v)})
	}
	slices.SortFunc(all, func(a, b Heavy) int {
		if a.Value != b.Value {
			if a.Value > b.Value {
				return -1
			}
			return 1
		}
		return compareStrings(a.Project, b.Project)
	})
	return slices.Clip(all[:min(n, len(all))])
}
