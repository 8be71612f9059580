package growstack

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The wrappers serve what they wrap, unchanged.
func TestWrappersPassThrough(t *testing.T) {
	served := 0
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		w.WriteHeader(http.StatusTeapot)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if served != 1 || rec.Code != http.StatusTeapot {
		t.Fatalf("served %d times, code %d", served, rec.Code)
	}

	refused := errors.New("refused")
	for _, c := range []struct {
		resp *authenticator.Response
		ok   bool
		err  error
	}{
		{&authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil},
		{nil, false, nil},
		{nil, false, refused},
	} {
		a := Authenticator(authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return c.resp, c.ok, c.err
		}))
		resp, ok, err := a.AuthenticateRequest(httptest.NewRequest(http.MethodGet, "/", nil))
		if resp != c.resp || ok != c.ok || err != c.err {
			t.Errorf("got %v %v %v, want %v %v %v", resp, ok, err, c.resp, c.ok, c.err)
		}
	}
}
