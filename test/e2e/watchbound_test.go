package e2e

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"go.miloapis.com/milo/pkg/tenancy"
)

// sharedMaxWatches is the shared server's --max-project-watches: small, so
// that every test's tenant clients run under the bound.
const sharedMaxWatches = 24

// TestProjectWatchesAreBounded: one project's users together hold at most
// --max-project-watches watches open; the next is refused with 429 and
// Retry-After, naming the bound, and nothing is counted against another
// project or the platform's superusers; a watch that ends frees its place.
func TestProjectWatchesAreBounded(t *testing.T) {
	m := shared
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	member := func(p string) kubernetes.Interface {
		admin := m.projectKube(t, p)
		createServiceAccount(t, admin, "default", "watcher")
		bindServiceAccount(t, admin, "", "cluster-admin", "default", "watcher")
		token, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "watcher", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := m.as(t, token.Status.Token, tenancy.ProjectPath(p))
		awaitAllowed(t, c, "watch", "", "configmaps")
		return c
	}
	a, b := m.newProject(t, "watches-a"), m.newProject(t, "watches-b")
	inA, inB := member(a), member(b)
	// open starts a watch without client-go's retries of a 429, which would
	// otherwise wait out Retry-After ten times.
	open := func(c kubernetes.Interface) (io.ReadCloser, error) {
		return c.CoreV1().RESTClient().Get().Namespace("default").Resource("configmaps").
			Param("watch", "true").MaxRetries(0).Stream(ctx)
	}
	var held []io.ReadCloser
	defer func() {
		for _, w := range held {
			w.Close()
		}
	}()
	for i := range sharedMaxWatches {
		w, err := open(inA)
		if err != nil {
			t.Fatalf("watch %d of %d: %v", i+1, sharedMaxWatches, err)
		}
		held = append(held, w)
	}
	_, err := open(inA)
	var status apierrors.APIStatus
	if !apierrors.IsTooManyRequests(err) || !errors.As(err, &status) || !strings.Contains(err.Error(), "watches open") {
		t.Fatalf("watch %d in project %s: %v, want 429 naming the bound", sharedMaxWatches+1, a, err)
	}
	if d := status.Status().Details; d == nil || d.RetryAfterSeconds <= 0 {
		t.Errorf("the refusal carries no retry-after: %+v", status.Status())
	}

	// Another project, and the platform's superuser in this one, are not held back.
	if w, err := open(inB); err != nil {
		t.Errorf("a watch in project %s while %s holds its most: %v", b, a, err)
	} else {
		w.Close()
	}
	if w, err := open(m.projectKube(t, a)); err != nil {
		t.Errorf("the platform's superuser's watch in project %s: %v", a, err)
	} else {
		w.Close()
	}

	// A watch that ends frees its place.
	held[0].Close()
	held = held[1:]
	eventually(t, "a place freed in project "+a, func() error {
		w, err := open(inA)
		if err != nil {
			return err
		}
		held = append(held, w)
		return nil
	})
}
