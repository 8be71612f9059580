package tenancy

import (
	"net/http"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// What the router did with a request: handed it to the handler chain, or
// answered it itself.
const (
	outcomeServed           = "served"
	outcomeNotFound         = "not_found"
	outcomeMethodNotAllowed = "method_not_allowed"
	outcomeBadRequest       = "bad_request"
	outcomeForbidden        = "forbidden"
)

// routed counts requests by view and router outcome. Its labels take a
// handful of values each; no tenant is ever a label.
var routed = metrics.NewCounterVec(&metrics.CounterOpts{
	Namespace:      "milo",
	Subsystem:      "tenant_router",
	Name:           "requests_total",
	Help:           "Requests by the kind of context they address (platform, project, organization, all-projects) and what the tenant router did with them (served: handed to the handler chain; not_found, method_not_allowed, bad_request, forbidden: answered by the router), counted when they end.",
	StabilityLevel: metrics.ALPHA,
}, []string{"view", "outcome"})

func init() { legacyregistry.MustRegister(routed) }

// statusOf records the status of an answer the router writes itself.
type statusOf struct {
	http.ResponseWriter
	status int
}

func (s *statusOf) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// outcomeOf names the outcome of an answer of the router's.
func outcomeOf(status int) string {
	switch status {
	case http.StatusNotFound:
		return outcomeNotFound
	case http.StatusMethodNotAllowed:
		return outcomeMethodNotAllowed
	case http.StatusForbidden:
		return outcomeForbidden
	default:
		return outcomeBadRequest
	}
}
