package tenantstorage

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"

	"go.miloapis.com/milo/pkg/tenancy"
)

// replicaMeter is one replica's meter of a project whose objects are
// counted in a usage tally: it decides from the tally as the quota
// package's meter does (that meter's own logic is tested with it in the
// e2e replicas test).
type replicaMeter struct {
	project  string
	limit    int64
	epoch    string
	prefixes *Prefixes
	// byteLimit, when set, limits the project's bytes too: they are then
	// counted in a tally of their own.
	byteLimit int64
	mu        sync.Mutex
	known     Tally
	// knownBytes is what the bytes tally held when last seen.
	knownBytes Tally
	counts     int
}

func (m *replicaMeter) Begin(ctx context.Context, t tenancy.Tenant, _ bool) (MeteredWrite, error) {
	if t.Name != m.project {
		return nil, nil
	}
	return &replicaWrite{m: m, ctx: ctx}, nil
}

type replicaWrite struct {
	m   *replicaMeter
	ctx context.Context
}

func (w *replicaWrite) Sizes() bool {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	return w.m.byteLimit > 0
}
func (w *replicaWrite) Charge(_, _ int64, _ bool) error { return nil }
func (w *replicaWrite) End(bool)                        {}
func (w *replicaWrite) ObjectsTally() string {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	return UsageTallyKey(idOf(w.m.project), w.m.epoch)
}
func (w *replicaWrite) BytesTally() string {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	if w.m.byteLimit == 0 {
		return ""
	}
	return BytesTallyKey(idOf(w.m.project), w.m.epoch)
}
func (w *replicaWrite) Learn(now Tally) {
	if now.Revision == 0 {
		return // absent: not counted yet
	}
	bytes := now.Key == w.BytesTally()
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	known := &w.m.known
	if bytes {
		known = &w.m.knownBytes
	}
	if now.Key != known.Key || now.Revision > known.Revision {
		*known = now
	}
}
func (w *replicaWrite) Untallied() {}
func (w *replicaWrite) Guard(objects, bytes int64, refusable bool) TallyGuard {
	return &replicaGuard{w: w, objects: objects, bytes: bytes, refusable: refusable}
}

type replicaGuard struct {
	w              *replicaWrite
	objects, bytes int64
	refusable      bool
	expected       []Tally
}

func (g *replicaGuard) Keys() []string {
	if b := g.w.BytesTally(); b != "" {
		return []string{g.w.ObjectsTally(), b}
	}
	return []string{g.w.ObjectsTally()}
}

func (g *replicaGuard) Expect(ahead []int64) []Tally {
	m := g.w.m
	keys := g.Keys()
	m.mu.Lock()
	out := []Tally{{Key: keys[0], Revision: m.known.Revision, Value: m.known.Value, Add: g.objects, Keep: true}}
	unknown := m.known.Key != keys[0] || m.known.Revision == 0
	if len(keys) > 1 {
		out = append(out, Tally{Key: keys[1], Revision: m.knownBytes.Revision, Value: m.knownBytes.Value, Add: g.bytes, Keep: true})
		unknown = unknown || m.knownBytes.Key != keys[1] || m.knownBytes.Revision == 0
	}
	m.mu.Unlock()
	if unknown || (g.refusable && g.over(out, ahead) != nil) {
		for i := range out {
			out[i].Revision = -1
		}
	}
	g.expected = out
	return out
}

// over refuses what the write adds where the tallies as in now, with
// ahead more (what writes before it in its transaction add), cannot hold
// it.
func (g *replicaGuard) over(now []Tally, ahead []int64) error {
	m := g.w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	at := func(i int) int64 {
		if i < len(ahead) {
			return now[i].Value + ahead[i]
		}
		return now[i].Value
	}
	if g.objects > 0 && at(0)+g.objects > m.limit {
		return Refused{Err: fmt.Errorf("over the limit of %d objects, %d stored", m.limit, at(0))}
	}
	if len(now) > 1 && g.bytes > 0 && at(1)+g.bytes > m.byteLimit {
		return Refused{Err: fmt.Errorf("over the limit of %d bytes, %d stored", m.byteLimit, at(1))}
	}
	return nil
}

func (g *replicaGuard) Moved(now []Tally) error {
	m := g.w.m
	absent := false
	for _, t := range now {
		absent = absent || t.Revision == 0
	}
	if absent {
		objects, bytes, err := CountUsage(g.w.ctx, etcdClient, m.prefixes, "/registry", idOf(m.project), now[0].Key, g.w.BytesTally())
		if err != nil {
			return err
		}
		m.mu.Lock()
		m.counts++
		m.mu.Unlock()
		now = []Tally{objects}
		if len(g.expected) > 1 {
			now = append(now, bytes)
		}
	}
	for _, t := range now {
		g.w.Learn(t)
	}
	if g.refusable {
		return g.over(now, nil)
	}
	return nil
}

func (g *replicaGuard) Stored(now []Tally) {
	for _, t := range now {
		g.w.Learn(t)
	}
}

// TestUsageTallyBoundsEveryReplica: two replicas' stores of one resource,
// each metering a project from its own knowledge, store no more objects
// than the project's limit between them: creates, deletes and updates that
// create move one count in etcd, in their own transactions; a new epoch
// counts the objects again and drops the old count; the project's purge
// deletes its count.
func TestUsageTallyBoundsEveryReplica(t *testing.T) {
	const project = "usage"
	m1 := &replicaMeter{project: project, limit: 5, epoch: "e1"}
	m2 := &replicaMeter{project: project, limit: 5, epoch: "e1"}
	s1, prefixes := newStorage(t, "usageobjects", Options{Meter: m1, Joints: NewJoints(etcdClient)})
	s2, _ := newStorage(t, "usageobjects", Options{Meter: m2, Joints: NewJoints(etcdClient)})
	plain, _ := newStorage(t, "usageobjects", Options{})
	prefixes.KeepUsageTallies("/registry")
	m1.prefixes, m2.prefixes = prefixes, prefixes
	ctx := in(project)
	stored := func() int64 {
		t.Helper()
		n, err := keyRanges.Count(context.Background(), "/registry/usageobjects/"+idOf(project)+"/")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tallyOf := func(epoch string) (int64, bool) {
		t.Helper()
		resp, err := etcdClient.Get(context.Background(), "/registry/"+UsageTallyKey(idOf(project), epoch))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return 0, false
		}
		var v int64
		if _, err := fmt.Sscan(string(resp.Kvs[0].Value), &v); err != nil {
			t.Fatal(err)
		}
		return v, true
	}
	// Two objects stored before the project was metered.
	create(t, plain, ctx, "/usageobjects", "ns", "before-1", "x")
	create(t, plain, ctx, "/usageobjects", "ns", "before-2", "x")
	create(t, plain, in("other"), "/usageobjects", "ns", "other", "x")

	// Twenty creates at once, every other one through each replica: the
	// first to find no tally counts what is stored; exactly three more fit.
	created, refused, other := burst(20, func(i int) error {
		s := []storage.Interface{s1, s2}[i%2]
		return s.Create(ctx, fmt.Sprintf("/usageobjects/ns/burst-%d", i), configMap("ns", fmt.Sprintf("burst-%d", i), 10), &corev1.ConfigMap{}, 0)
	})
	if len(other) > 0 || created != 3 || refused != 17 {
		t.Fatalf("20 creates through two replicas with 3 free: %d stored, %d refused, other errors %v", created, refused, other)
	}
	if n := stored(); n != 5 {
		t.Fatalf("etcd holds %d of the project's objects, want 5", n)
	}
	if v, ok := tallyOf("e1"); !ok || v != 5 {
		t.Fatalf("the tally holds %d (stored: %v), want 5", v, ok)
	}
	if m1.counts+m2.counts == 0 {
		t.Fatal("nothing counted the objects stored before")
	}

	// A delete through one replica frees a unit the other takes.
	if err := s2.Delete(ctx, "/usageobjects/ns/before-1", &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, _ := tallyOf("e1"); v != 4 {
		t.Fatalf("after a delete the tally holds %d, want 4", v)
	}
	// An update that creates stores the object and the count one more in
	// one transaction; one the limit cannot hold stores nothing and leaves
	// the tally.
	createByUpdate := func(s storage.Interface, name string) error {
		return s.GuaranteedUpdate(ctx, "/usageobjects/ns/"+name, &corev1.ConfigMap{}, true, nil, func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
			if res.ResourceVersion != 0 {
				return nil, nil, errors.New("exists")
			}
			return configMap("ns", name, 10), nil, nil
		}, nil)
	}
	if err := createByUpdate(s1, "applied"); err != nil {
		t.Fatal(err)
	}
	if err := createByUpdate(s2, "applied-2"); !apierrors.IsForbidden(err) {
		t.Fatalf("an update creating past the limit: %v", err)
	}
	if v, _ := tallyOf("e1"); v != 5 || stored() != 5 {
		t.Fatalf("after an update that created and one refused the tally holds %d, etcd %d objects; want 5 and 5", v, stored())
	}
	// An update whose create another writer made first (its transaction
	// finds the key taken) is made again, finds the object, and fails:
	// the count is left as that writer's (an unmetered one) left it.
	if err := s1.Delete(ctx, "/usageobjects/ns/before-2", &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	raced := false
	err := s2.GuaranteedUpdate(ctx, "/usageobjects/ns/raced", &corev1.ConfigMap{}, true, nil, func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		if res.ResourceVersion != 0 {
			return nil, nil, errors.New("exists")
		}
		if !raced { // another writer creates it first: this attempt fails, the next finds it
			raced = true
			create(t, plain, ctx, "/usageobjects", "ns", "raced", "x")
		}
		return configMap("ns", "raced", 10), nil, nil
	}, nil)
	if err == nil || !raced {
		t.Fatalf("an update that lost its create to another writer: %v", err)
	}
	if v, _ := tallyOf("e1"); v != 4 || stored() != 5 {
		t.Fatalf("after a failed update the tally holds %d, etcd %d objects; want 4 (given back) and 5 (one unmetered)", v, stored())
	}

	// A new epoch (the grants changed): counted again from what is stored,
	// the old epoch's tally deleted.
	for _, m := range []*replicaMeter{m1, m2} {
		m.mu.Lock()
		m.epoch, m.limit = "e2", 7
		m.mu.Unlock()
	}
	create(t, plain, ctx, "/usageobjects", "ns", "unmetered-between", "x") // 6 stored
	// A delete before anything counted the new epoch writes no count (the
	// next create counts), and teaches a replica nothing.
	if err := s1.Delete(ctx, "/usageobjects/ns/applied", &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := tallyOf("e2"); ok {
		t.Fatal("a delete wrote a count nothing had made")
	}
	for _, name := range []string{"in-e2", "in-e2-b"} { // 5 stored: two fit
		if err := s1.Create(ctx, "/usageobjects/ns/"+name, configMap("ns", name, 10), &corev1.ConfigMap{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s2.Create(ctx, "/usageobjects/ns/in-e2-c", configMap("ns", "in-e2-c", 10), &corev1.ConfigMap{}, 0); !apierrors.IsForbidden(err) {
		t.Fatalf("the eighth object under a limit of 7: %v", err)
	}
	if v, ok := tallyOf("e2"); !ok || v != 7 || stored() != 7 {
		t.Fatalf("the new epoch's tally holds %d, etcd %d objects; want 7 and 7", v, stored())
	}
	if _, ok := tallyOf("e1"); ok {
		t.Fatal("the old epoch's tally was kept")
	}

	// The project's purge takes its tally with its objects.
	if _, err := Purge(context.Background(), keyRanges, prefixes, idOf(project)); err != nil {
		t.Fatal(err)
	}
	if _, ok := tallyOf("e2"); ok || stored() != 0 {
		t.Fatalf("after the purge: tally kept %v, %d objects", ok, stored())
	}
	// Counting skips the tallies themselves.
	if _, _, err := CountUsage(context.Background(), etcdClient, prefixes, "/registry", idOf(project), UsageTallyKey(idOf(project), "e3"), ""); err != nil {
		t.Fatal(err)
	}
	if tally, _, err := CountUsage(context.Background(), etcdClient, prefixes, "/registry", idOf(project), UsageTallyKey(idOf(project), "e3"), ""); err != nil || tally.Value != 0 {
		t.Fatalf("counting a project that stores nothing, beside its tally: %d, %v", tally.Value, err)
	}
}

// TestBurstInOneReplicaTakesTurns: one replica's creates and deletes of a
// metered project at once each store, none losing its rounds to the
// others: the replica's transactions on one count take turns, so a burst
// from one client is not answered 429 however many run at once.
func TestBurstInOneReplicaTakesTurns(t *testing.T) {
	const project, burst = "usage-burst", 64
	m := &replicaMeter{project: project, limit: 1000, epoch: "e"}
	s, prefixes := newStorage(t, "usageburst", Options{Meter: m, Joints: NewJoints(etcdClient)})
	prefixes.KeepUsageTallies("/registry")
	m.prefixes = prefixes
	ctx := in(project)
	at := func(name string) string { return "/usageburst/ns/" + name }
	all := func(do func(i int) error) []error {
		var wg sync.WaitGroup
		errs := make([]error, burst)
		for i := range burst {
			wg.Go(func() { errs[i] = do(i) })
		}
		wg.Wait()
		return slices.DeleteFunc(errs, func(err error) bool { return err == nil })
	}
	if errs := all(func(i int) error {
		name := fmt.Sprintf("cm-%d", i)
		return s.Create(ctx, at(name), configMap("ns", name, 10), &corev1.ConfigMap{}, 0)
	}); len(errs) > 0 {
		t.Fatalf("%d of %d creates at once in one replica failed, the first: %v", len(errs), burst, errs[0])
	}
	tally := func() int64 {
		t.Helper()
		resp, err := etcdClient.Get(context.Background(), "/registry/"+UsageTallyKey(idOf(project), "e"))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the tally: %v, %v", resp, err)
		}
		var v int64
		fmt.Sscan(string(resp.Kvs[0].Value), &v)
		return v
	}
	if v := tally(); v != burst {
		t.Fatalf("after %d creates the tally holds %d", burst, v)
	}
	if errs := all(func(i int) error {
		return s.Delete(ctx, at(fmt.Sprintf("cm-%d", i)), &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
	}); len(errs) > 0 {
		t.Fatalf("%d of %d deletes at once in one replica failed, the first: %v", len(errs), burst, errs[0])
	}
	if v := tally(); v != 0 {
		t.Fatalf("after the deletes the tally holds %d", v)
	}
}

// holdTurn takes the turn of a project's objects count in j, waits until
// waiting writes of it wait behind it, and returns what gives it back.
func holdTurn(t *testing.T, j *Joints, key string, waiting int, start func()) func() {
	t.Helper()
	return holdTurns(t, j, []string{key}, waiting, start)
}

// holdTurns is holdTurn of the tallies keys.
func holdTurns(t *testing.T, j *Joints, keys []string, waiting int, start func()) func() {
	t.Helper()
	done, _, err := j.turns.take(context.Background(), keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	start()
	for {
		j.turns.mu.Lock()
		n := len(j.turns.waiting[batchSet(keys)])
		j.turns.mu.Unlock()
		if n == waiting {
			return done
		}
		goruntime.Gosched()
	}
}

// TestWaitingWritesCommittedTogether: the creates of a metered project
// waiting for the count's turn are committed in one transaction, as many
// as fit under the limit after those before them; the others are refused,
// a create whose own key exists fails alone, and one whose request ends
// while it waits is not stored.
func TestWaitingWritesCommittedTogether(t *testing.T) {
	run := benchRuns.Add(1)
	resource, project := fmt.Sprintf("together%d", run), fmt.Sprintf("together-%d", run)
	const limit, burst = 40, 63
	m := &replicaMeter{project: project, limit: limit, epoch: "e"}
	j := NewJoints(etcdClient)
	s, prefixes := newStorage(t, resource, Options{Meter: m, Joints: j})
	prefixes.KeepUsageTallies("/registry")
	m.prefixes = prefixes
	ctx := in(project)
	at := func(name string) string { return "/" + resource + "/ns/" + name }
	// The first create counts the project: its count is known from then on.
	if err := s.Create(ctx, at("first"), configMap("ns", "first", 10), &corev1.ConfigMap{}, 0); err != nil {
		t.Fatal(err)
	}
	key := UsageTallyKey(idOf(project), "e")
	errs := make([]error, burst)
	var wg sync.WaitGroup
	release := holdTurn(t, j, key, burst, func() {
		for i := range burst {
			wg.Go(func() {
				name := fmt.Sprintf("cm-%d", i)
				errs[i] = s.Create(ctx, at(name), configMap("ns", name, 10), &corev1.ConfigMap{}, 0)
			})
		}
	})
	release()
	wg.Wait()
	refused := 0
	for _, err := range errs {
		switch {
		case err == nil:
		case apierrors.IsForbidden(err):
			refused++
		default:
			t.Fatalf("a create of the burst failed: %v", err)
		}
	}
	if want := burst - (limit - 1); refused != want {
		t.Fatalf("%d of %d creates with %d free were refused, want %d", refused, burst, limit-1, want)
	}
	stored, err := etcdClient.Get(context.Background(), "/registry/"+resource+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	revisions := map[int64]int{}
	for _, kv := range stored.Kvs {
		revisions[kv.ModRevision]++
	}
	if len(stored.Kvs) != limit || len(revisions) != 2 {
		t.Fatalf("%d objects stored in %d transactions (%v), want %d in 2: the first, then the rest together", len(stored.Kvs), len(revisions), revisions, limit)
	}
	if v := tallyOf(t, key); v != limit {
		t.Fatalf("the count holds %d, want %d", v, limit)
	}

	// A create whose key exists fails, alone; the others waiting with it
	// are stored. One whose request ends while it waits is not.
	var kept []string
	for i, err := range errs {
		if err == nil {
			kept = append(kept, fmt.Sprintf("cm-%d", i))
		}
	}
	existing := kept[0]
	for _, name := range kept[1:3] {
		if err := s.Delete(ctx, at(name), &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{existing, "cm-a", "cm-b"}
	errs = make([]error, len(names)+1)
	gone, cancel := context.WithCancel(ctx)
	release = holdTurn(t, j, key, len(names)+1, func() {
		for i, name := range names {
			wg.Go(func() { errs[i] = s.Create(ctx, at(name), configMap("ns", name, 10), &corev1.ConfigMap{}, 0) })
		}
		wg.Go(func() {
			errs[len(names)] = s.Create(gone, at("cm-c"), configMap("ns", "cm-c", 10), &corev1.ConfigMap{}, 0)
		})
	})
	cancel()
	for {
		// The ended request leaves the writes waiting.
		j.turns.mu.Lock()
		n := len(j.turns.waiting[batchSet([]string{key})])
		j.turns.mu.Unlock()
		if n == len(names) {
			break
		}
		goruntime.Gosched()
	}
	release()
	wg.Wait()
	if !storage.IsExist(errs[0]) || errs[1] != nil || errs[2] != nil || !errors.Is(errs[3], context.Canceled) {
		t.Fatalf("an existing object, two new ones and a request ended: %v", errs)
	}
	if got, err := etcdClient.Get(context.Background(), "/registry/"+resource+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || got.Count != limit {
		t.Fatalf("%d objects stored, want %d: %v", got.Count, limit, err)
	}
	if v := tallyOf(t, key); v != limit {
		t.Fatalf("the count holds %d, want %d", v, limit)
	}
}

// TestWaitingUpdatesOfOneObjectCommittedApart: two updates of one object
// of a project whose bytes are counted, waiting for the count's turn
// together, are not put in one transaction (etcd refuses one that writes a
// key twice): both are stored, one after the other.
func TestWaitingUpdatesOfOneObjectCommittedApart(t *testing.T) {
	run := benchRuns.Add(1)
	resource, project := fmt.Sprintf("apart%d", run), fmt.Sprintf("apart-%d", run)
	m := &replicaMeter{project: project, limit: 1000, byteLimit: 1 << 20, epoch: "e"}
	j := NewJoints(etcdClient)
	s, prefixes := newStorage(t, resource, Options{Meter: m, Joints: j})
	prefixes.KeepUsageTallies("/registry")
	m.prefixes = prefixes
	ctx := in(project)
	key := "/" + resource + "/ns/cm"
	if err := s.Create(ctx, key, configMap("ns", "cm", 10), &corev1.ConfigMap{}, 0); err != nil {
		t.Fatal(err)
	}
	w, _ := m.Begin(ctx, tenancy.Tenant{Name: project}, false)
	keys := w.(*replicaWrite).Guard(0, 1, true).Keys()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	release := holdTurns(t, j, keys, 2, func() {
		for i := range errs {
			wg.Go(func() {
				errs[i] = s.GuaranteedUpdate(ctx, key, &corev1.ConfigMap{}, false, nil, grow(100*(i+1)), nil)
			})
		}
	})
	release()
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("two updates of one object waiting together: %v", errs)
	}
}

// tallyOf is what the tally at key (under /registry) holds.
func tallyOf(t *testing.T, key string) int64 {
	t.Helper()
	resp, err := etcdClient.Get(context.Background(), "/registry/"+key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the tally: %v, %v", resp, err)
	}
	var v int64
	fmt.Sscan(string(resp.Kvs[0].Value), &v)
	return v
}

// TestBytesTallyBoundsEveryReplica: two replicas' stores metering a
// project's bytes, each from its own knowledge, store no more bytes than
// the limit between them: creates add their size to the bytes tally,
// updates their growth (or what they free), deletes take their size, each
// in its own transaction, and the tally is at every step what etcd holds.
func TestBytesTallyBoundsEveryReplica(t *testing.T) {
	const project, limit = "usage-bytes", 4000
	m1 := &replicaMeter{project: project, limit: 1000, byteLimit: limit, epoch: "b"}
	m2 := &replicaMeter{project: project, limit: 1000, byteLimit: limit, epoch: "b"}
	s1, prefixes := newStorage(t, "usagebytes", Options{Meter: m1, Joints: NewJoints(etcdClient)})
	s2, _ := newStorage(t, "usagebytes", Options{Meter: m2, Joints: NewJoints(etcdClient)})
	plain, _ := newStorage(t, "usagebytes", Options{})
	prefixes.KeepUsageTallies("/registry")
	m1.prefixes, m2.prefixes = prefixes, prefixes
	ctx := in(project)
	at := func(name string) string { return "/usagebytes/ns/" + name }
	stored := func() int64 {
		t.Helper()
		n, err := valueBytes(context.Background(), etcdClient, "/registry/usagebytes/"+idOf(project)+"/", 0)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tally := func() int64 {
		t.Helper()
		resp, err := etcdClient.Get(context.Background(), "/registry/"+BytesTallyKey(idOf(project), "b"))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the bytes tally: %v, %v", resp, err)
		}
		var v int64
		fmt.Sscan(string(resp.Kvs[0].Value), &v)
		return v
	}
	matches := func(when string) {
		t.Helper()
		if v, n := tally(), stored(); v != n || n > limit {
			t.Fatalf("%s: the bytes tally holds %d, etcd %d bytes of the project (limit %d)", when, v, n, limit)
		}
	}
	// One object stored before the project was metered, and one stored
	// in an encoding longer than the server's own (as an older server, or
	// defaults applied on reading, leave it): a delete takes what it takes
	// in storage, not what it would take encoded again.
	create(t, plain, ctx, "/usagebytes", "ns", "before", strings.Repeat("b", 500))
	padded := `{"kind":"ConfigMap",   "apiVersion":"v1",` + strings.Repeat(" ", 300) + `"metadata":{"name":"padded","namespace":"ns"},"data":{"v":"p"}}`
	if _, err := etcdClient.Put(context.Background(), "/registry/usagebytes/"+idOf(project)+"/ns/padded", padded); err != nil {
		t.Fatal(err)
	}

	// Twenty creates of about 700 bytes at once through two replicas:
	// only as many as the limit holds are stored.
	created, refused, other := burst(20, func(i int) error {
		name := fmt.Sprintf("burst-%02d", i)
		return []storage.Interface{s1, s2}[i%2].Create(ctx, at(name), configMap("ns", name, 600), &corev1.ConfigMap{}, 0)
	})
	if len(other) > 0 || created == 0 || created+refused != 20 {
		t.Fatalf("20 creates through two replicas: %d stored, %d refused, other errors %v", created, refused, other)
	}
	matches("after the burst")
	one, err := etcdClient.Get(context.Background(), "/registry/usagebytes/"+idOf(project)+"/ns/burst-", clientv3.WithPrefix(), clientv3.WithLimit(1))
	if err != nil || len(one.Kvs) != 1 {
		t.Fatalf("reading a stored create: %v", err)
	}
	if free := limit - stored(); free >= int64(len(one.Kvs[0].Value)) {
		t.Fatalf("%d bytes free after the burst: a create of %d was refused that fit", free, len(one.Kvs[0].Value))
	}
	// Growing an object through the other replica than created it:
	// refused past the limit, stored within it; shrinking frees.
	first := fmt.Sprintf("burst-%02d", func() int {
		for i := range 20 {
			if _, err := etcdClient.Get(context.Background(), "/registry/usagebytes/"+idOf(project)+"/ns/"+fmt.Sprintf("burst-%02d", i)); err == nil {
				var out corev1.ConfigMap
				if s1.Get(ctx, at(fmt.Sprintf("burst-%02d", i)), storage.GetOptions{}, &out) == nil {
					return i
				}
			}
		}
		t.Fatal("nothing stored")
		return 0
	}())
	if err := s2.GuaranteedUpdate(ctx, at(first), &corev1.ConfigMap{}, false, nil, grow(600+limit), nil); !apierrors.IsForbidden(err) {
		t.Fatalf("growing past the limit: %v", err)
	}
	matches("after a refused growth")
	if err := s2.GuaranteedUpdate(ctx, at(first), &corev1.ConfigMap{}, false, nil, grow(10), nil); err != nil {
		t.Fatal(err)
	}
	matches("after a shrink")
	free := limit - stored()
	if err := s1.GuaranteedUpdate(ctx, at(first), &corev1.ConfigMap{}, false, nil, grow(10+int(free)-5), nil); err != nil {
		t.Fatalf("growing by %d of %d free: %v", free-5, free, err)
	}
	matches("after a growth that fit")
	// Deletes through either replica free what the object held.
	if err := s2.Delete(ctx, at(first), &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s1.Delete(ctx, at("before"), &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	matches("after two deletes")
	if err := s1.Delete(ctx, at("padded"), &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	matches("after deleting an object stored in a longer encoding")
	// An update that creates adds its size; one the limit cannot hold
	// stores nothing.
	createByUpdate := func(s storage.Interface, name string, size int) error {
		return s.GuaranteedUpdate(ctx, at(name), &corev1.ConfigMap{}, true, nil, func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
			return configMap("ns", name, size), nil, nil
		}, nil)
	}
	if err := createByUpdate(s2, "applied", 100); err != nil {
		t.Fatal(err)
	}
	if err := createByUpdate(s1, "applied-big", limit); !apierrors.IsForbidden(err) {
		t.Fatalf("an update creating past the limit: %v", err)
	}
	matches("after updates that create")
	// An update that changes no size moves no tally, and one that changes
	// nothing writes nothing.
	before, _ := etcdClient.Get(context.Background(), "/registry/"+BytesTallyKey(idOf(project), "b"))
	if err := s1.GuaranteedUpdate(ctx, at("applied"), &corev1.ConfigMap{}, false, nil, grow(100), nil); err != nil {
		t.Fatal(err)
	}
	if err := s1.GuaranteedUpdate(ctx, at("applied"), &corev1.ConfigMap{}, false, nil, grow(100), nil); err != nil {
		t.Fatal(err)
	}
	after, _ := etcdClient.Get(context.Background(), "/registry/"+BytesTallyKey(idOf(project), "b"))
	if after.Kvs[0].ModRevision != before.Kvs[0].ModRevision {
		t.Fatal("an update of the same size moved the tally")
	}
	matches("after updates that changed nothing")
	// A fresh count finds what the tally holds.
	objects, bytes, err := CountUsage(context.Background(), etcdClient, prefixes, "/registry", idOf(project), UsageTallyKey(idOf(project), "b"), BytesTallyKey(idOf(project), "b"))
	if err != nil || bytes.Value != stored() || objects.Value != int64(created) {
		t.Fatalf("counted afresh: %d objects, %d bytes (%v); want %d and %d", objects.Value, bytes.Value, err, created, stored())
	}
}

// lateMeter meters its project from its second write on: a grant that
// arrives while an update is under way.
type lateMeter struct {
	*replicaMeter
	calls atomic.Int32
}

func (m *lateMeter) Begin(ctx context.Context, t tenancy.Tenant, release bool) (MeteredWrite, error) {
	if m.calls.Add(1) == 1 {
		return nil, nil
	}
	return m.replicaMeter.Begin(ctx, t, release)
}

// TestUpdateCountedWhenTheGrantArrivesMidway: an update that began before
// its project's usage was counted in storage, and finds it counted when
// it comes to write, is made again the way that moves the counts: the
// object it creates, and its bytes, are counted.
func TestUpdateCountedWhenTheGrantArrivesMidway(t *testing.T) {
	const project = "usage-late"
	m := &lateMeter{replicaMeter: &replicaMeter{project: project, limit: 10, byteLimit: 1 << 20, epoch: "l"}}
	s, prefixes := newStorage(t, "usagelate", Options{Meter: m, Joints: NewJoints(etcdClient)})
	prefixes.KeepUsageTallies("/registry")
	m.prefixes = prefixes
	ctx := in(project)
	tries := 0
	err := s.GuaranteedUpdate(ctx, "/usagelate/ns/late", &corev1.ConfigMap{}, true, nil, func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		tries++
		return configMap("ns", "late", 100), nil, nil
	}, nil)
	if err != nil || tries != 2 {
		t.Fatalf("an update that creates, its project counted meanwhile: %v after %d tries, want stored after 2", err, tries)
	}
	objects, bytes := tallyValues(t, project, "l")
	stored, err := valueBytes(context.Background(), etcdClient, "/registry/usagelate/"+idOf(project)+"/", 0)
	if err != nil || objects != 1 || bytes != stored {
		t.Fatalf("the tallies hold %d objects and %d bytes, etcd %d bytes (%v); want 1 and what etcd holds", objects, bytes, stored, err)
	}
}

// TestUpdateMadeAgainWhenItsObjectMoved: an attempt of an update whose
// object and counts both moved since it read them (another replica wrote
// both) is made again on the object as it is now, as upstream's update
// is, not refused for what it would have added to the object it read.
func TestUpdateMadeAgainWhenItsObjectMoved(t *testing.T) {
	const project = "usage-moved"
	m1 := &replicaMeter{project: project, limit: 100, byteLimit: 3000, epoch: "m"}
	m2 := &replicaMeter{project: project, limit: 100, byteLimit: 3000, epoch: "m"}
	s1, prefixes := newStorage(t, "usagemoved", Options{Meter: m1, Joints: NewJoints(etcdClient)})
	s2, _ := newStorage(t, "usagemoved", Options{Meter: m2, Joints: NewJoints(etcdClient)})
	prefixes.KeepUsageTallies("/registry")
	m1.prefixes, m2.prefixes = prefixes, prefixes
	ctx := in(project)
	key := "/usagemoved/ns/x"
	if err := s1.Create(ctx, key, configMap("ns", "x", 100), &corev1.ConfigMap{}, 0); err != nil {
		t.Fatal(err)
	}
	tries := 0
	err := s1.GuaranteedUpdate(ctx, key, &corev1.ConfigMap{}, false, nil, func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		tries++
		if tries == 1 {
			// Meanwhile, through the other replica: the object written, and
			// most of what is free taken by another.
			if err := s2.GuaranteedUpdate(ctx, key, &corev1.ConfigMap{}, false, nil, grow(120), nil); err != nil {
				t.Fatal(err)
			}
			if err := s2.Create(ctx, "/usagemoved/ns/y", configMap("ns", "y", 1500), &corev1.ConfigMap{}, 0); err != nil {
				t.Fatal(err)
			}
			return configMap("ns", "x", 1500), nil, nil // fitted as read; no longer
		}
		return configMap("ns", "x", 200), nil, nil
	}, nil)
	if err != nil || tries != 2 {
		t.Fatalf("an update whose object and counts moved: %v after %d tries, want stored after 2", err, tries)
	}
	_, bytes := tallyValues(t, project, "m")
	if stored, _ := valueBytes(context.Background(), etcdClient, "/registry/usagemoved/"+idOf(project)+"/", 0); bytes != stored {
		t.Fatalf("the bytes tally holds %d, etcd %d", bytes, stored)
	}
}

// hookKV runs beforeWrite once, before the first conditional transaction
// committed through it: a count's write.
type hookKV struct {
	clientv3.KV
	beforeWrite func()
	fired       bool
}

func (h *hookKV) Txn(ctx context.Context) clientv3.Txn { return &hookTxn{Txn: h.KV.Txn(ctx), h: h} }

type hookTxn struct {
	clientv3.Txn
	h           *hookKV
	conditional bool
}

func (t *hookTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.conditional = t.conditional || len(cs) > 0
	t.Txn = t.Txn.If(cs...)
	return t
}
func (t *hookTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *hookTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t *hookTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.conditional && !t.h.fired {
		t.h.fired = true
		t.h.beforeWrite()
	}
	return t.Txn.Commit()
}

// TestCountSeesADeleteMadeMeanwhile: a delete made between a count's read
// and its write (the count not written yet, so the delete finds no count
// to move) makes the count count again, rather than write the deleted
// object into it.
func TestCountSeesADeleteMadeMeanwhile(t *testing.T) {
	const project = "usage-count-delete"
	m := &replicaMeter{project: project, limit: 100, byteLimit: 1 << 20, epoch: "d"}
	s, prefixes := newStorage(t, "usagecountdelete", Options{Meter: m, Joints: NewJoints(etcdClient)})
	plain, _ := newStorage(t, "usagecountdelete", Options{})
	prefixes.KeepUsageTallies("/registry")
	m.prefixes = prefixes
	ctx := in(project)
	for _, name := range []string{"a", "b", "c"} {
		create(t, plain, ctx, "/usagecountdelete", "ns", name, "x")
	}
	kv := &hookKV{KV: etcdClient, beforeWrite: func() {
		if err := s.Delete(ctx, "/usagecountdelete/ns/b", &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}}
	objects, bytes, err := CountUsage(context.Background(), kv, prefixes, "/registry", idOf(project), UsageTallyKey(idOf(project), "d"), BytesTallyKey(idOf(project), "d"))
	stored, _ := valueBytes(context.Background(), etcdClient, "/registry/usagecountdelete/"+idOf(project)+"/", 0)
	if err != nil || !kv.fired || objects.Value != 2 || bytes.Value != stored {
		t.Fatalf("a count with a delete between its read and its write: %d objects, %d bytes (etcd %d), %v; want 2 and what etcd holds", objects.Value, bytes.Value, stored, err)
	}
	if o, b := tallyValues(t, project, "d"); o != 2 || b != stored {
		t.Fatalf("the tallies hold %d and %d", o, b)
	}
}

// tallyValues reads a project's usage tallies of epoch.
func tallyValues(t *testing.T, project, epoch string) (objects, bytes int64) {
	t.Helper()
	for _, k := range []struct {
		key string
		to  *int64
	}{{UsageTallyKey(idOf(project), epoch), &objects}, {BytesTallyKey(idOf(project), epoch), &bytes}} {
		resp, err := etcdClient.Get(context.Background(), "/registry/"+k.key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 1 {
			fmt.Sscan(string(resp.Kvs[0].Value), k.to)
		}
	}
	return objects, bytes
}

// burst runs write(0) … write(n-1) at once and tells how many stored,
// how many were refused (403), and the other errors.
func burst(n int, write func(i int) error) (created, refused int, other []error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		wg.Go(func() {
			err := write(i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case apierrors.IsForbidden(err):
				refused++
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	return created, refused, other
}

var _ TalliedWrite = (*replicaWrite)(nil)

var benchRuns atomic.Int64

// benchStorage is a storage of a resource of its own (its watch cache
// starts empty) with a project, whose objects are counted in storage where
// counted, and the project's context.
func benchStorage(b *testing.B, name string, counted bool) (storage.Interface, context.Context, string) {
	run := benchRuns.Add(1)
	resource := fmt.Sprintf("bench%s%d", name, run)
	project := fmt.Sprintf("bench-%s-%d", name, run)
	o := Options{Joints: NewJoints(etcdClient)}
	m := &replicaMeter{project: project, limit: 1 << 40, epoch: "e"}
	if counted {
		o.Meter = m
	}
	s, prefixes := newStorage(b, resource, o)
	prefixes.KeepUsageTallies("/registry")
	m.prefixes = prefixes
	return s, in(project), resource
}

// BenchmarkCreateCounted times a create stored alone (upstream's
// transaction) against one stored with its project's object count moved
// in the same transaction, one after the other on the package's etcd.
func BenchmarkCreateCounted(b *testing.B) {
	for _, counted := range []bool{false, true} {
		b.Run(fmt.Sprintf("counted=%v", counted), func(b *testing.B) {
			s, ctx, resource := benchStorage(b, "counted", counted)
			out := &corev1.ConfigMap{}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				name := fmt.Sprintf("cm-%d", i)
				if err := s.Create(ctx, "/"+resource+"/ns/"+name, configMap("ns", name, 1024), out, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUpdateCounted times an update of one object in a project whose
// usage is not counted in storage (upstream's update), whose objects are
// (upstream's update: an update that does not create moves no count), and
// whose bytes are too (a read of the object, then one transaction storing
// it and moving the bytes tally).
func BenchmarkUpdateCounted(b *testing.B) {
	for _, mode := range []string{"none", "objects", "bytes"} {
		b.Run("counted="+mode, func(b *testing.B) {
			run := benchRuns.Add(1)
			resource := fmt.Sprintf("benchupdated%d", run)
			project := fmt.Sprintf("bench-updated-%d", run)
			o := Options{Joints: NewJoints(etcdClient)}
			m := &replicaMeter{project: project, limit: 1 << 40, epoch: "e"}
			if mode == "bytes" {
				m.byteLimit = 1 << 40
			}
			if mode != "none" {
				o.Meter = m
			}
			s, prefixes := newStorage(b, resource, o)
			prefixes.KeepUsageTallies("/registry")
			m.prefixes = prefixes
			ctx := in(project)
			key := "/" + resource + "/ns/cm"
			if err := s.Create(ctx, key, configMap("ns", "cm", 1024), &corev1.ConfigMap{}, 0); err != nil {
				b.Fatal(err)
			}
			out := &corev1.ConfigMap{}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := s.GuaranteedUpdate(ctx, key, out, false, nil, grow(1024+i%2), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBurstCounted times creates made 64 at a time in one project
// whose objects are not counted in storage, and in one whose are: a
// server's transactions on one count are committed in turn, several
// waiting writes in one transaction.
func BenchmarkBurstCounted(b *testing.B) {
	for _, counted := range []bool{false, true} {
		b.Run(fmt.Sprintf("counted=%v", counted), func(b *testing.B) {
			s, ctx, resource := benchStorage(b, "burst", counted)
			var n atomic.Int64
			b.SetParallelism(32) // 64 writers on two cores
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				out := &corev1.ConfigMap{}
				for pb.Next() {
					name := fmt.Sprintf("cm-%d", n.Add(1))
					if err := s.Create(ctx, "/"+resource+"/ns/"+name, configMap("ns", name, 1024), out, 0); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
