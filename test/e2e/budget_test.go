package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/fairness"
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
	awaitAllowed(t, kubeFor(t, cfg), "*", "*", "*")
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
// next request wait. The seats are held by creates whose bodies never finish
// arriving, as a slow client's would, so once one has been counted for
// fairness.SeatStuckAfter it no longer is, and the waiting request is
// served: a slow member holds the project back that long, once. Such
// requests are bounded too: with fairness.StuckSeatsPerSeat of them per seat
// in flight beside the counted ones, the next request waits and is refused
// with 429 after the longest wait. Another project, and the platform's
// superuser in the same project, are served meanwhile; once the held
// requests end, the project is served again.
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
	hold := func(n int) {
		for range n {
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
	}
	t.Cleanup(func() { release(); held.Wait() })
	stuckBefore := m.metricSum(t, "milo_tenant_seats_stuck_total")

	// Every seat held: the project's next request waits while the held
	// creates are counted, then takes their place. (Until the creates reach
	// the server, a request runs at once: tried again.)
	hold(sharedSeats)
	eventually(t, "a request of project "+a+" waiting for a held seat, then served", func() error {
		began := time.Now()
		if err := get(inA); err != nil {
			t.Fatalf("a request beside %d held ones: %v, want it served once they no longer count", sharedSeats, err)
		}
		if waited := time.Since(began); waited < fairness.SeatStuckAfter {
			return fmt.Errorf("served in %v, before the held seats stopped counting (%v)", waited, fairness.SeatStuckAfter)
		}
		return nil
	})
	if n := m.metricSum(t, "milo_tenant_seats_stuck_total"); n < stuckBefore+sharedSeats {
		t.Errorf("milo_tenant_seats_stuck_total %v, want at least %v", n, stuckBefore+sharedSeats)
	}

	// As many slow requests in flight as the seats allow: the next waits
	// for one to end, and is refused.
	hold(sharedSeats * fairness.StuckSeatsPerSeat)
	eventually(t, "a request of project "+a+" refused beside its slow requests", func() error {
		err := get(inA)
		if !apierrors.IsTooManyRequests(err) {
			return fmt.Errorf("a request beside %d slow ones: %v, want 429", sharedSeats*(1+fairness.StuckSeatsPerSeat), err)
		}
		if !strings.Contains(err.Error(), "requests in flight") {
			t.Fatalf("the refusal: %v, want 429 naming the seats", err)
		}
		return nil
	})
	// Meanwhile another project, and the platform's superuser in this one,
	// are served (a request that waited for the seats would be refused).
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

// TestProjectWatchTurns: a project's watches write their events in the
// project's turns (--tenant-concurrency; the shared server gives one), and a
// watch whose client stops reading — its writes blocked on a full
// connection — is no longer counted once it has held its turn too long, so
// the project's other watches go on receiving their events.
func TestProjectWatchTurns(t *testing.T) {
	m := shared
	p := m.newProject(t, "watch-turns")
	cfg := memberConfig(t, m, p)
	kube := kubeFor(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cms := kube.CoreV1().ConfigMaps("default")
	for _, name := range []string{"big", "small"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The stuck client: a watch over HTTP/1.1 whose body is never read, on
	// a connection whose receive buffer is small and fixed, so that a few
	// MiB of events fill the connection and the server's write blocks.
	stuckCfg := rest.CopyConfig(cfg)
	stuckCfg.NextProtos = []string{"http/1.1"}
	stuckCfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, address)
		if tcp, ok := c.(*net.TCPConn); ok {
			err = errors.Join(err, tcp.SetReadBuffer(4<<10))
		}
		return c, err
	}
	hc, err := rest.HTTPClientFor(stuckCfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, stuckCfg.Host+"/api/v1/namespaces/default/configmaps?watch=true&fieldSelector=metadata.name%3Dbig", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 {
		t.Fatalf("the stuck watch: %s over %s, want 200 over HTTP/1.1", resp.Status, resp.Proto)
	}
	// The reading client.
	w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=small"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	stuckBefore := m.metricSum(t, "milo_tenant_watch_turns_stuck_total")
	// Far more than the stuck connection holds.
	payload := strings.Repeat("x", 900<<10)
	for i := range 20 {
		if _, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Data: map[string]string{"payload": payload, "n": fmt.Sprint(i)}}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The reading watch's event waits for the project's one turn, which the
	// stuck watch holds, then takes it from it.
	if _, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "small"}, Data: map[string]string{"n": "1"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for received := false; !received; {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the reading watch ended")
			}
			cm, isCM := e.Object.(*corev1.ConfigMap)
			received = isCM && cm.Data["n"] == "1"
		case <-timeout:
			t.Fatal("the reading watch got no event while another watch of its project was stuck")
		}
	}
	if n := m.metricSum(t, "milo_tenant_watch_turns_stuck_total"); n <= stuckBefore {
		t.Fatalf("milo_tenant_watch_turns_stuck_total %v, not above %v: the stuck watch held no turn, and the test proved nothing", n, stuckBefore)
	}
}
