package evaluator

import (
	"k8s.io/component-base/metrics"
)

var indexEntriesDesc = metrics.NewDesc("milo_iam_index_entries",
	"Entries in Milo IAM's in-memory indexes: hierarchy nodes, PolicyBindings, memberships and Roles.",
	[]string{"index"}, nil, metrics.ALPHA, "")

// IndexCollector reports the sizes of an Evaluator's indexes when scraped:
// four series, however large the indexes are.
type IndexCollector struct {
	metrics.BaseStableCollector
	e *Evaluator
}

// NewIndexCollector returns a collector of e's index sizes, for registering
// with the server's metrics registry.
func NewIndexCollector(e *Evaluator) *IndexCollector { return &IndexCollector{e: e} }

// DescribeWithStability implements metrics.StableCollector.
func (c *IndexCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- indexEntriesDesc }

// CollectWithStability implements metrics.StableCollector.
func (c *IndexCollector) CollectWithStability(ch chan<- metrics.Metric) {
	e := c.e
	e.mu.RLock()
	nodes, bindings, memberships := len(e.parents), len(e.bindings), len(e.memberships)
	e.mu.RUnlock()
	e.rolesMu.RLock()
	roles := len(e.roles)
	e.rolesMu.RUnlock()
	for index, n := range map[string]int{"nodes": nodes, "bindings": bindings, "memberships": memberships, "roles": roles} {
		ch <- metrics.NewLazyConstMetric(indexEntriesDesc, metrics.GaugeValue, float64(n), index)
	}
}
