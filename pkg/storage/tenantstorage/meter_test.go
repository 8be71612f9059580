package tenantstorage

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"

	"go.miloapis.com/milo/pkg/tenancy"
)

// tally meters one project with simple limits, to see what the storage
// layer charges; the quota package's StorageMeter is tested on its own.
type tally struct {
	project          string
	maxObjects       int64
	mu               sync.Mutex
	objects, bytes   int64
	begun, refusals  int
	unrefusableGrows int
}

func (m *tally) Begin(_ context.Context, t tenancy.Tenant, _ bool) (MeteredWrite, error) {
	if t.Name != m.project {
		return nil, nil
	}
	m.mu.Lock()
	m.begun++
	m.mu.Unlock()
	return &tallyWrite{m: m}, nil
}

type tallyWrite struct {
	m              *tally
	objects, bytes int64
	ended          bool
}

func (w *tallyWrite) Sizes() bool { return true }

func (w *tallyWrite) Charge(objects, bytes int64, refusable bool) error {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	d := objects - w.objects
	if d > 0 && m.maxObjects > 0 && m.objects+d > m.maxObjects {
		if refusable {
			m.refusals++
			return errors.New("over the limit")
		}
		m.unrefusableGrows++
	}
	m.objects += d
	m.bytes += bytes - w.bytes
	w.objects, w.bytes = objects, bytes
	return nil
}

func (w *tallyWrite) End(stored bool) {
	if w.ended {
		panic("ended twice")
	}
	w.ended = true
	if !stored {
		m := w.m
		m.mu.Lock()
		m.objects -= w.objects
		m.bytes -= w.bytes
		m.mu.Unlock()
	}
}

func configMap(ns, name string, size int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": strings.Repeat("x", size)}}
}

func grow(size int) storage.UpdateFunc {
	return func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
		cm := input.(*corev1.ConfigMap).DeepCopy()
		cm.Data = map[string]string{"v": strings.Repeat("y", size)}
		return cm, nil, nil
	}
}

// What the storage layer charges a project is exactly what etcd holds of
// it, as StoredUsage reads it back after a restart: creates, updates that
// grow and shrink, an update that creates, a failed create, and deletes.
func TestMeteredWritesAddUpToWhatIsStored(t *testing.T) {
	m := &tally{project: "metered"}
	s, prefixes := newStorage(t, "metered", Options{Meter: m})
	ctx := in("metered")
	for i, size := range []int{10, 2000, 30000} {
		name := string(rune('a' + i))
		if err := s.Create(ctx, "/metered/ns/"+name, configMap("ns", name, size), &corev1.ConfigMap{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Another project's and the platform's writes are not this project's.
	create(t, s, in("other"), "/metered", "ns", "a", "other")
	create(t, s, context.Background(), "/metered", "ns", "a", "platform")
	if err := s.Create(ctx, "/metered/ns/a", configMap("ns", "a", 5), &corev1.ConfigMap{}, 0); !storage.IsExist(err) {
		t.Fatalf("second create of a: %v", err)
	}
	for _, u := range []struct {
		name string
		size int
	}{{"a", 5000}, {"c", 100}, {"d", 700}} {
		if err := s.GuaranteedUpdate(ctx, "/metered/ns/"+u.name, &corev1.ConfigMap{}, true, nil, func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
			cm := input.(*corev1.ConfigMap).DeepCopy()
			if res.ResourceVersion == 0 { // d does not exist: the update creates it
				cm = configMap("ns", u.name, 0)
			}
			cm.Data = map[string]string{"v": strings.Repeat("y", u.size)}
			return cm, nil, nil
		}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "/metered/ns/b", &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	objects, bytes, err := StoredUsage(context.Background(), keyRanges, prefixes, idOf("metered"), true)
	if err != nil {
		t.Fatal(err)
	}
	if objects != 3 || m.objects != objects || m.bytes != bytes {
		t.Fatalf("charged %d objects, %d bytes; etcd holds %d objects, %d bytes (want 3 objects)", m.objects, m.bytes, objects, bytes)
	}
	if counted, _, err := StoredUsage(context.Background(), keyRanges, prefixes, idOf("metered"), false); err != nil || counted != objects {
		t.Fatalf("counting keys only: %d, %v", counted, err)
	}
}

func TestMeterRefusesGrowthButNotTheServerOrCleanUp(t *testing.T) {
	m := &tally{project: "full", maxObjects: 2}
	s, prefixes := newStorage(t, "full", Options{Meter: m})
	ctx := in("full")
	for _, name := range []string{"a", "b"} {
		if err := s.Create(ctx, "/full/ns/"+name, configMap("ns", name, 10), &corev1.ConfigMap{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Create(ctx, "/full/ns/c", configMap("ns", "c", 10), &corev1.ConfigMap{}, 0)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `full "c" is forbidden: over the limit`) {
		t.Fatalf("create past the limit: %v", err)
	}
	// An update that would create is refused alike.
	err = s.GuaranteedUpdate(ctx, "/full/ns/c", &corev1.ConfigMap{}, true, nil, func(runtime.Object, storage.ResponseMeta) (runtime.Object, *uint64, error) {
		return configMap("ns", "c", 10), nil, nil
	}, nil)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("update creating past the limit: %v", err)
	}
	if keys := etcdKeys(t, "/registry/full/"+idOf("full")+"/"); len(keys) != 2 {
		t.Fatalf("a refused write stored something: %v", keys)
	}
	// The server's own writes are charged, never refused.
	server := request.WithUser(ctx, &user.DefaultInfo{Name: user.APIServerUser})
	if err := s.Create(server, "/full/ns/sa", configMap("ns", "sa", 10), &corev1.ConfigMap{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.GuaranteedUpdate(ctx, "/full/ns/a", &corev1.ConfigMap{}, false, nil, grow(50), nil); err != nil {
		t.Fatalf("an update adding no object: %v", err)
	}
	// Starting an object's deletion (its finalizers keep it) is never
	// refused; growing an object being deleted is, like any growth.
	tally := m
	tally.maxObjects = 0
	grown := func(cm *corev1.ConfigMap) storage.UpdateFunc {
		return func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			return cm, nil, nil
		}
	}
	current := &corev1.ConfigMap{}
	if err := s.Get(ctx, "/full/ns/b", storage.GetOptions{}, current); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	terminating := current.DeepCopy()
	terminating.DeletionTimestamp, terminating.Finalizers = &now, []string{"example.com/hold"}
	bytesCap := &capBytes{tally: tally}
	s2, _ := newStorage(t, "full", Options{Meter: bytesCap})
	// s2's watch cache hands an update its copy of the object as the
	// current state. A copy older than the store makes the meter judge the
	// stale state first (refused, then tried again on the stored one), a
	// refusal counted for a write that then succeeds: each update waits for
	// the cache to hold what was last written.
	caughtUp := func(rv string) {
		t.Helper()
		if err := s2.Get(ctx, "/full/ns/b", storage.GetOptions{ResourceVersion: rv}, &corev1.ConfigMap{}); err != nil {
			t.Fatal(err)
		}
	}
	caughtUp(current.ResourceVersion)
	written := &corev1.ConfigMap{}
	if err := s2.GuaranteedUpdate(ctx, "/full/ns/b", written, false, nil, grown(terminating), nil); err != nil {
		t.Fatalf("starting a deletion at the bytes limit: %v", err)
	}
	caughtUp(written.ResourceVersion)
	bigger := terminating.DeepCopy()
	bigger.Data = map[string]string{"v": strings.Repeat("z", 5000)}
	if err := s2.GuaranteedUpdate(ctx, "/full/ns/b", &corev1.ConfigMap{}, false, nil, grown(bigger), nil); !apierrors.IsForbidden(err) {
		t.Fatalf("growing an object being deleted past the bytes limit: %v", err)
	}
	// The server's writes on its own account are not refused either.
	if err := s2.GuaranteedUpdate(ServerWrite(ctx), "/full/ns/b", written, false, nil, grown(bigger), nil); err != nil {
		t.Fatalf("a server write past the bytes limit: %v", err)
	}
	caughtUp(written.ResourceVersion)
	released := bigger.DeepCopy()
	released.Finalizers = nil
	if err := s2.GuaranteedUpdate(ctx, "/full/ns/b", &corev1.ConfigMap{}, false, nil, grown(released), nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "sa"} {
		if err := s.Delete(ctx, "/full/ns/"+name, &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	objects, bytes, err := StoredUsage(context.Background(), keyRanges, prefixes, idOf("full"), true)
	if err != nil {
		t.Fatal(err)
	}
	if m.objects != 0 || m.bytes != 0 || objects != 0 || bytes != 0 || m.refusals != 3 || m.unrefusableGrows != 1 {
		t.Fatalf("after deleting everything: charged %d objects, %d bytes (etcd %d, %d); %d refusals, %d unrefused",
			m.objects, m.bytes, objects, bytes, m.refusals, m.unrefusableGrows)
	}
}

// capBytes is tally refusing any growth in bytes.
type capBytes struct{ tally *tally }

func (c *capBytes) Begin(ctx context.Context, t tenancy.Tenant, release bool) (MeteredWrite, error) {
	w, err := c.tally.Begin(ctx, t, release)
	if w == nil {
		return w, err
	}
	return &capBytesWrite{w.(*tallyWrite)}, nil
}

type capBytesWrite struct{ *tallyWrite }

func (w *capBytesWrite) Charge(objects, bytes int64, refusable bool) error {
	if bytes > w.bytes && refusable {
		w.m.mu.Lock()
		w.m.refusals++
		w.m.mu.Unlock()
		return errors.New("no more bytes")
	}
	return w.tallyWrite.Charge(objects, bytes, refusable)
}

// A project nothing meters pays nothing: its writes do not measure sizes.
func TestUnmeteredResourcesAndTenantsAreNotCharged(t *testing.T) {
	m := &tally{project: "p"}
	s, _ := newStorage(t, "events", Options{Meter: m})
	create(t, s, in("p"), "/events", "ns", "e", "an event")
	if m.begun != 0 {
		t.Fatalf("an Event was metered")
	}
	cms, _ := newStorage(t, "unmetered", Options{Meter: m})
	create(t, cms, in("q"), "/unmetered", "ns", "x", "q's")
	create(t, cms, context.Background(), "/unmetered", "ns", "x", "platform")
	if m.begun != 0 {
		t.Fatalf("another tenant's writes were metered")
	}
}
