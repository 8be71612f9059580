package hierarchy

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Phases of a hierarchy object in Milo's hierarchy metrics.
const (
	phasePending  = "Pending"
	phaseReady    = "Ready"
	phaseDeleting = "Deleting"
)

var (
	objectsDesc = metrics.NewDesc("milo_hierarchy_objects",
		"Organizations, Folders and Projects by kind and phase (Pending: not Ready yet; Ready; Deleting), as this server's hierarchy cache holds them.",
		[]string{"kind", "phase"}, nil, metrics.ALPHA, "")
	oldestDesc = metrics.NewDesc("milo_hierarchy_oldest_seconds",
		"How long the oldest Pending (since its creation) or Deleting (since its deletion) Organization, Folder or Project of each kind has been so; 0 when none is.",
		[]string{"kind", "phase"}, nil, metrics.ALPHA, "")
)

// phaseKey is a kind and a phase.
type phaseKey struct{ kind, phase string }

// phases counts the cached hierarchy by kind and phase, and remembers since
// when each Pending or Deleting object has been so: bytes for the objects in
// those phases only, none for the Ready ones. It is filled by one event handler
// per informer and read when metrics are scraped.
type phases struct {
	metrics.BaseStableCollector
	mu     sync.Mutex
	counts map[phaseKey]int
	since  map[phaseKey]map[string]time.Time
}

func newPhases() *phases {
	return &phases{counts: map[phaseKey]int{}, since: map[phaseKey]map[string]time.Time{}}
}

// phaseOf is the phase obj is in, and since when.
func phaseOf(obj any) (string, time.Time) {
	m := Object(obj)
	switch {
	case m == nil:
		return phasePending, time.Time{}
	case m.GetDeletionTimestamp() != nil:
		return phaseDeleting, m.GetDeletionTimestamp().Time
	case IsReady(obj):
		return phaseReady, time.Time{}
	default:
		return phasePending, m.GetCreationTimestamp().Time
	}
}

func (p *phases) change(kind string, old, obj any, remove bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := Object(old); u != nil {
		phase, _ := phaseOf(u)
		k := phaseKey{kind, phase}
		p.counts[k]--
		delete(p.since[k], u.GetName())
	}
	if u := Object(obj); u != nil && !remove {
		phase, since := phaseOf(u)
		k := phaseKey{kind, phase}
		p.counts[k]++
		if phase != phaseReady {
			if p.since[k] == nil {
				p.since[k] = map[string]time.Time{}
			}
			p.since[k][u.GetName()] = since
		}
	}
}

// watch keeps p current for one informer's kind.
func (p *phases) watch(kind string, inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.change(kind, nil, obj, false) },
		UpdateFunc: func(old, obj any) { p.change(kind, old, obj, false) },
		DeleteFunc: func(obj any) { p.change(kind, obj, nil, true) },
	})
	return err
}

// DescribeWithStability implements metrics.StableCollector.
func (p *phases) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- objectsDesc
	ch <- oldestDesc
}

// CollectWithStability implements metrics.StableCollector.
func (p *phases) CollectWithStability(ch chan<- metrics.Metric) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, kind := range []string{"Organization", "Folder", "Project"} {
		for _, phase := range []string{phasePending, phaseReady, phaseDeleting} {
			k := phaseKey{kind, phase}
			ch <- metrics.NewLazyConstMetric(objectsDesc, metrics.GaugeValue, float64(p.counts[k]), kind, phase)
			if phase == phaseReady {
				continue
			}
			oldest := 0.0
			for _, since := range p.since[k] {
				oldest = max(oldest, now.Sub(since).Seconds())
			}
			ch <- metrics.NewLazyConstMetric(oldestDesc, metrics.GaugeValue, oldest, kind, phase)
		}
	}
}

// register publishes p; in a process with several trees (tests), the first's.
func (p *phases) register() { _ = legacyregistry.CustomRegister(p) }
