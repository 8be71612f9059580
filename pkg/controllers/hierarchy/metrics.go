package hierarchy

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Stages of a deletion in milo_hierarchy_deletion_duration_seconds.
const (
	// stageEmptied: everything below the object is deleted (its cleanup finalizer is removed).
	stageEmptied = "emptied"
	// stagePurged: a project's storage is purged and its name released.
	stagePurged = "purged"
)

var (
	// deletionDuration is the cascade's duration, by kind and stage: a
	// handful of series, however many objects are deleted.
	deletionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "milo",
		Subsystem:      "hierarchy",
		Name:           "deletion_duration_seconds",
		Help:           "Time from an Organization's, Folder's or Project's deletion to the end of a stage of its cascade: emptied (everything below it deleted) and, for Projects, purged (storage removed, name released).",
		Buckets:        metrics.ExponentialBuckets(0.05, 2, 16), // 50 ms to ~27 min
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "stage"})
	// purgeDuration is the time the storage purge of one project takes.
	purgeDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      "milo",
		Subsystem:      "project",
		Name:           "purge_duration_seconds",
		Help:           "Time the purge of one deleted project's storage takes.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 16), // 1 ms to ~33 s
		StabilityLevel: metrics.ALPHA,
	})
)

func init() { legacyregistry.MustRegister(deletionDuration, purgeDuration) }

// observeDeletion records how long obj's deletion took to reach stage.
func observeDeletion(obj *unstructured.Unstructured, stage string) {
	if ts := obj.GetDeletionTimestamp(); ts != nil {
		deletionDuration.WithLabelValues(obj.GetKind(), stage).Observe(time.Since(ts.Time).Seconds())
	}
}
