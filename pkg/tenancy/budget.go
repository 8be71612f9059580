package tenancy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
)

// Budget charges each tenant for the time its requests keep the server busy
// and refuses the requests of a tenant that has spent its share
// (pkg/fairness.Budget; docs/fairness.md).
type Budget interface {
	// Admit tells whether tenant may make a request now, and if not, how
	// long until it may.
	Admit(tenant string) (retryAfter time.Duration, ok bool)
	// Charge spends d of tenant's budget.
	Charge(tenant string, d time.Duration)
	// Rate is the handler time, in seconds, a tenant earns per second.
	Rate() float64
}

// Seats bound how many requests of one tenant run at once
// (pkg/fairness.Seats; docs/fairness.md).
type Seats interface {
	// Take waits for one of tenant's seats and returns the function that
	// frees it, or false if none came free in time.
	Take(ctx context.Context, tenant string) (release func(), ok bool)
	// Per is how many requests of one tenant run at once.
	Per() int
	// Most is how many may be past their wait at once, those that ran so
	// long they stopped counting included.
	Most() int
}

// Turns bound how many of one tenant's watches write an event at once
// (pkg/fairness.Turns; docs/fairness.md).
type Turns interface {
	// Take waits for one of tenant's turns and returns the function that
	// gives it back, or false if ctx ended first.
	Take(ctx context.Context, tenant string) (release func(), ok bool)
}

// budgetKey names tenant t in the budget: a project by its storage id (a
// project created again under its old name starts afresh), an organization
// context by its name.
func budgetKey(t Tenant) string {
	if t.Kind == Project && t.ID != "" {
		return "project/" + t.ID
	}
	return t.Kind.View() + "/" + t.Name
}

// admit applies r.Budget and r.Seats to a request of tenant t, or answers
// it (429, or 404 if its tenant was deleted meanwhile) and returns false.
// Admitted, it returns the writer to serve the request with and the function
// to call when it is served. The budget refuses a tenant in debt at once; a
// request that is not long-running then waits for one of the tenant's seats
// and is charged its time from then on; a long-running request (a watch)
// holds no seat and is charged only the time its responses take to write.
func (r *Router) admit(ctx context.Context, w http.ResponseWriter, req *http.Request, t Tenant, info *request.RequestInfo, fail func(error)) (http.ResponseWriter, func(), bool) {
	key := budgetKey(t)
	longRunning := info != nil && (info.Verb == "watch" || (r.LongRunning != nil && r.LongRunning(req, info)))
	if r.Budget != nil {
		if wait, ok := r.Budget.Admit(key); !ok {
			seconds := max(1, int(math.Ceil(wait.Seconds())))
			// 429 with Retry-After: client-go and kubectl wait and retry by themselves.
			err := apierrors.NewTooManyRequests(fmt.Sprintf("%s has used its share of the server's time (%.2g CPU seconds per second): retry in %d s",
				describe(t), r.Budget.Rate(), seconds), seconds)
			w.Header().Set("Retry-After", strconv.Itoa(seconds))
			fail(err)
			return w, nil, false
		}
	}
	release := func() {}
	if r.Seats != nil && info != nil && !longRunning {
		var ok bool
		if release, ok = r.Seats.Take(ctx, key); !ok {
			// Answered even when the request's context ended: a client
			// still there (its project deleted, its own ?timeout= passed)
			// must not read an empty 200; to one gone, the write is lost.
			if errors.Is(context.Cause(ctx), ErrTenantGone) {
				fail(notFound(t))
				return w, nil, false
			}
			err := apierrors.NewTooManyRequests(fmt.Sprintf("%s has had as many requests in flight as one tenant may (%d at once, up to %d with slow ones) for too long: retry in 1 s",
				describe(t), r.Seats.Per(), r.Seats.Most()), 1)
			w.Header().Set("Retry-After", "1")
			fail(err)
			return w, nil, false
		}
	}
	if longRunning && (r.Budget != nil || r.Turns != nil) {
		cw := &chargedWriter{ResponseWriter: w, charge: func(time.Duration) {}}
		if r.Budget != nil {
			cw.charge = func(d time.Duration) { r.Budget.Charge(key, d) }
		}
		// Turns for watches only: another long-running request (a proxied
		// stream, logs) writes as its backend reads, and would hold a turn
		// while it waits for the backend, not for the client.
		if r.Turns != nil && info.Verb == "watch" {
			cw.turn = func() (func(), bool) { return r.Turns.Take(ctx, key) }
		}
		return responsewriter.WrapForHTTP1Or2(cw), func() { cw.settle(); release() }, true
	}
	if r.Budget == nil {
		return w, release, true
	}
	began := time.Now()
	return w, func() { r.Budget.Charge(key, time.Since(began)); release() }, true
}

// notFound is the answer to a request of tenant t, which does not exist.
func notFound(t Tenant) error {
	if t.Kind == Organization {
		return apierrors.NewNotFound(organizationsResource, t.Name)
	}
	return apierrors.NewNotFound(projectsResource, t.Name)
}

// describe names a tenant in an error message.
func describe(t Tenant) string {
	if t.Kind == Organization {
		return "the context of organization " + t.Name
	}
	return "project " + t.Name
}

// chargedWriter writes a long-running request's responses (a watch's
// events) in the tenant's turns, and charges the time they take to write:
// encoding is done before. With turns, an event is written and flushed in
// one of the tenant's turns, and the flush is charged too: it waits for the
// connection's writer (on HTTP/2, the one all the connection's streams
// share), behind at most the tenant's few other turns and whatever other
// tenants' streams on that connection queued — the CPU ratio then prices
// that wait at what the process spent; an event is charged at most
// maxChargedTurn, as a flush blocked longer waits for a client that does
// not read. Without turns a thousand watches on
// one connection would each be charged the others' flushes, so only the
// writes are charged. (A write larger than HTTP/2's buffer of a few KiB
// waits for that writer too, and on HTTP/1.1 a write waits for a slow
// reader: those waits are charged.) A watch served over a WebSocket takes
// the connection over and is not charged.
type chargedWriter struct {
	http.ResponseWriter
	charge  func(time.Duration)
	pending time.Duration
	// turn, if set, waits for one of the tenant's turns to write
	// (Router.Turns); held gives back the turn taken, which the flush that
	// ends an event does.
	turn func() (release func(), ok bool)
	held func()
}

// Unwrap is the writer it decorates (responsewriter.UserProvidedDecorator).
func (c *chargedWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *chargedWriter) Write(p []byte) (int, error) {
	if c.turn != nil && c.held == nil {
		release, ok := c.turn()
		if !ok {
			// The request ended while it waited (its client went, its
			// project was deleted): the event is dropped whole, and the
			// watch ends at its next look at the request.
			return len(p), nil
		}
		c.held = release
	}
	began := time.Now()
	n, err := c.ResponseWriter.Write(p)
	c.pending += time.Since(began)
	return n, err
}

// Flush flushes, then charges what was written since the last flush.
func (c *chargedWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		began := time.Now()
		f.Flush()
		if c.turn != nil {
			c.pending += time.Since(began)
		}
	}
	if c.turn != nil {
		// No more than a turn is counted for: a flush blocked longer waits
		// for a client that does not read, which is no work of the server.
		c.pending = min(c.pending, maxChargedTurn)
	}
	c.settle()
}

// maxChargedTurn is the most one event's write and flush are charged with
// turns: as long as a turn is counted (pkg/fairness.DefaultStuckAfter).
const maxChargedTurn = 250 * time.Millisecond

// settle charges what is not charged yet and gives back the turn held.
func (c *chargedWriter) settle() {
	if c.held != nil {
		c.held()
		c.held = nil
	}
	if c.pending > 0 {
		c.charge(c.pending)
		c.pending = 0
	}
}
