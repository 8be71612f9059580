package tenancy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// noSeat is a tenant whose seats never come free in time.
type noSeat struct{}

func (noSeat) Take(context.Context, string) (func(), bool) { return nil, false }
func (noSeat) Per() int                                    { return 1 }
func (noSeat) Most() int                                   { return 4 }

// TestRefusedSeatAnswers429 holds the answers a request gets when its
// tenant's seats do not come free: 429 with Retry-After and a message naming
// the tenant and its seats, or 404 when the wait ended because the tenant
// was deleted. Long-running requests take no seat.
func TestRefusedSeatAnswers429(t *testing.T) {
	r := &Router{Seats: noSeat{}}
	web := Tenant{Kind: Project, Name: "web", ID: "p.1"}
	get := &request.RequestInfo{IsResourceRequest: true, Verb: "get", Resource: "configmaps"}
	admit := func(ctx context.Context, info *request.RequestInfo) (*httptest.ResponseRecorder, bool, error) {
		w := httptest.NewRecorder()
		var failed error
		_, release, ok := r.admit(ctx, w, httptest.NewRequest(http.MethodGet, "/", nil), web, info, func(err error) { failed = err })
		if ok {
			release()
		}
		return w, ok, failed
	}

	w, ok, err := admit(context.Background(), get)
	if ok || !apierrors.IsTooManyRequests(err) {
		t.Fatalf("without a seat: admitted %v, %v; want 429", ok, err)
	}
	if !strings.Contains(err.Error(), "project web has had as many requests in flight as one tenant may (1 at once, up to 4 with slow ones)") {
		t.Errorf("the refusal %q does not name the tenant and its seats", err)
	}
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}

	gone, cancel := context.WithCancelCause(context.Background())
	cancel(ErrTenantGone)
	if _, ok, err := admit(gone, get); ok || !apierrors.IsNotFound(err) {
		t.Fatalf("a tenant deleted while its request waited: admitted %v, %v; want 404", ok, err)
	}

	watch := &request.RequestInfo{IsResourceRequest: true, Verb: "watch", Resource: "configmaps"}
	if _, ok, err := admit(context.Background(), watch); !ok || err != nil {
		t.Fatalf("a watch waited for a seat: admitted %v, %v", ok, err)
	}
}
