package hierarchy

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Phases of a hierarchy object in milo_hierarchy_objects.
const (
	phasePending  = "Pending"
	phaseReady    = "Ready"
	phaseDeleting = "Deleting"
)

// objectsByPhase counts the cached Organizations, Folders and Projects by
// phase: nine series however many there are.
var objectsByPhase = metrics.NewGaugeVec(&metrics.GaugeOpts{
	Namespace:      "milo",
	Subsystem:      "hierarchy",
	Name:           "objects",
	Help:           "Organizations, Folders and Projects by kind and phase (Pending: not Ready yet; Ready; Deleting), as the server's hierarchy cache holds them.",
	StabilityLevel: metrics.ALPHA,
}, []string{"kind", "phase"})

func init() { legacyregistry.MustRegister(objectsByPhase) }

// phaseOf is the phase obj counts in.
func phaseOf(obj *unstructured.Unstructured) string {
	switch {
	case obj.GetDeletionTimestamp() != nil:
		return phaseDeleting
	case IsReady(obj):
		return phaseReady
	default:
		return phasePending
	}
}

// countPhases keeps objectsByPhase current for one informer's kind: one event
// handler, two gauge updates per change of phase.
func countPhases(kind string, inf cache.SharedIndexInformer) error {
	for _, p := range []string{phasePending, phaseReady, phaseDeleting} {
		objectsByPhase.WithLabelValues(kind, p).Set(0)
	}
	phase := func(obj any) (string, bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return "", false
		}
		return phaseOf(u), true
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := phase(obj); ok {
				objectsByPhase.WithLabelValues(kind, p).Inc()
			}
		},
		UpdateFunc: func(old, obj any) {
			was, ok1 := phase(old)
			is, ok2 := phase(obj)
			if ok1 && ok2 && was != is {
				objectsByPhase.WithLabelValues(kind, was).Dec()
				objectsByPhase.WithLabelValues(kind, is).Inc()
			}
		},
		DeleteFunc: func(obj any) {
			if p, ok := phase(obj); ok {
				objectsByPhase.WithLabelValues(kind, p).Dec()
			}
		},
	})
	return err
}
