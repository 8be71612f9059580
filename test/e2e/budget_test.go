package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// budgetTestShare is the --tenant-cpu-share of TestProjectCPUBudget's own
// server: small enough that sixteen clients' requests pass it on a machine of
// any size (a project's rate is the share times the server's CPUs).
const budgetTestShare = 0.02

// TestProjectCPUBudget: a project whose requests keep the server busy past
// its share (--tenant-cpu-share) is refused with 429 and Retry-After, naming
// the budget; another project used by the same kind of member, and the
// platform's superuser in the same project, are served meanwhile; once the
// project has earned its time back, it is served again. Its server is its
// own, with a share small enough to pass from one test client on any
// machine (the shared server runs with the default, so every other test's
// tenant clients run under that).
func TestProjectCPUBudget(t *testing.T) {
	m, err := startMilo(t.TempDir(), fmt.Sprintf("--tenant-cpu-share=%g", budgetTestShare))
	if err != nil {
		t.Fatal(err)
	}
	m.stopOnCleanup(t)
	if err := m.ensureOrganization("acme"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := m.newProject(t, "budget-a"), m.newProject(t, "budget-b")
	inA, inB := kubeFor(t, memberConfig(t, m, a)), kubeFor(t, memberConfig(t, m, b))

	// Sixteen members' requests at once: each is charged its own wall-clock
	// time, sixteen seconds a second, far past any share of this machine.
	var refused error
	var once sync.Once
	floodCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := 0; i < 2000 && floodCtx.Err() == nil; i++ {
				if err := get(inA); apierrors.IsTooManyRequests(err) {
					once.Do(func() { refused = err; stop() })
				} else if err != nil && floodCtx.Err() == nil {
					t.Errorf("a request of project %s: %v", a, err)
					stop()
				}
			}
		})
	}
	wg.Wait()
	stop()
	if refused == nil {
		t.Fatalf("32,000 requests of project %s at once were never refused", a)
	}
	var status apierrors.APIStatus
	if !errors.As(refused, &status) || !strings.Contains(refused.Error(), "share of the server's time") {
		t.Fatalf("the refusal: %v, want 429 naming the budget", refused)
	}
	if d := status.Status().Details; d == nil || d.RetryAfterSeconds <= 0 {
		t.Errorf("the refusal carries no retry-after: %+v", status.Status())
	}

	// Meanwhile another project, and the platform's superuser in this one,
	// are served.
	if err := get(inB); err != nil {
		t.Errorf("project %s while %s is over its budget: %v", b, a, err)
	}
	if err := get(m.projectKube(t, a)); err != nil {
		t.Errorf("the platform's superuser in project %s: %v", a, err)
	}
	// The project has earned its time back within the longest debt (10 s).
	eventually(t, "project "+a+" served again", func() error { return get(inA) })
}

// memberConfig reaches project p as a member of it: a service account of
// the project bound to cluster-admin there.
func memberConfig(t *testing.T, m *milo, p string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	admin := m.projectKube(t, p)
	createServiceAccount(t, admin, "default", "busy")
	bindServiceAccount(t, admin, "", "cluster-admin", "default", "busy")
	token, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "busy", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(m.configAt(t, tenancy.ProjectPath(p)))
	cfg.BearerToken = token.Status.Token
	return cfg
}

// get reads the default namespace without client-go's retries of a 429,
// which would otherwise wait out Retry-After.
func get(c kubernetes.Interface) error {
	return c.CoreV1().RESTClient().Get().Resource("namespaces").Name("default").MaxRetries(0).Do(context.Background()).Error()
}

// sharedSeats is the shared server's --tenant-concurrency: the default on a
// two-core machine, set so that the test holds every seat on any machine.
const sharedSeats = 1

// TestProjectSeats: a project whose requests take every one of its seats
// (--tenant-concurrency; the shared server runs with sharedSeats) makes its
// next request wait, and refuses it with 429 after the longest wait; another
// project, and the platform's superuser in the same project, are served
// meanwhile; once a seat is free, the project is served again. The seat is
// held by a create whose body never finishes arriving, as a slow client's
// would.
func TestProjectSeats(t *testing.T) {
	m := shared
	a, b := m.newProject(t, "seats-a"), m.newProject(t, "seats-b")
	cfgA := memberConfig(t, m, a)
	inA, inB := kubeFor(t, cfgA), kubeFor(t, memberConfig(t, m, b))
	hc, err := rest.HTTPClientFor(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	holdCtx, release := context.WithCancel(context.Background())
	var held sync.WaitGroup
	for range sharedSeats {
		body, feed := io.Pipe()
		req, err := http.NewRequestWithContext(holdCtx, http.MethodPost, cfgA.Host+"/api/v1/namespaces/default/configmaps", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		held.Go(func() {
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
			}
		})
		held.Go(func() {
			// Part of the object, then nothing until the test lets go.
			_, _ = feed.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap",`))
			<-holdCtx.Done()
			feed.CloseWithError(holdCtx.Err())
		})
	}
	t.Cleanup(func() { release(); held.Wait() })

	// The project's next request waits for a seat, and is refused.
	eventually(t, "a request of project "+a+" refused for want of a seat", func() error {
		err := get(inA)
		if !apierrors.IsTooManyRequests(err) {
			return fmt.Errorf("a request beside %d held ones: %v, want 429", sharedSeats, err)
		}
		if !strings.Contains(err.Error(), "requests in flight") {
			t.Fatalf("the refusal: %v, want 429 naming the seats", err)
		}
		return nil
	})
	// Meanwhile another project, and the platform's superuser in this one,
	// are served.
	if err := get(inB); err != nil {
		t.Errorf("project %s while %s's seats are taken: %v", b, a, err)
	}
	if err := get(m.projectKube(t, a)); err != nil {
		t.Errorf("the platform's superuser in project %s: %v", a, err)
	}
	// Let the held creates go: the project is served again (once its
	// budget has earned back the time they were charged).
	release()
	held.Wait()
	eventually(t, "project "+a+" served again", func() error { return get(inA) })
}
