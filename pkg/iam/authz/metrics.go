package authz

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// decisionDuration times Milo IAM's part of authorization, by decision.
var decisionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
	Namespace:      "milo",
	Subsystem:      "iam",
	Name:           "decision_duration_seconds",
	Help:           "Time Milo IAM takes to decide a request it has an opinion on, by decision (allowed; no_opinion: IAM grants nothing and the next authorizer decides).",
	Buckets:        metrics.ExponentialBuckets(0.000_001, 4, 10), // 1 µs to ~0.26 s
	StabilityLevel: metrics.ALPHA,
}, []string{"decision"})

func init() { legacyregistry.MustRegister(decisionDuration) }
