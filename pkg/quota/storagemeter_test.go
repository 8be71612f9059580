package quota

import (
	"context"
	"errors"
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sync"
	"sync/atomic"
	"testing"

	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenancy"
)

// storedUsage is what the tests' storage holds of each project, by storage id.
type storedUsage struct {
	mu    sync.Mutex
	of    map[string]Usage
	loads atomic.Int32
}

func (s *storedUsage) load(_ context.Context, id string, bytes bool) (Usage, error) {
	s.loads.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.of[id]
	if !bytes {
		u.Bytes = 0
	}
	return u, nil
}

func meteredLedger(t *testing.T, stored map[string]Usage, grants map[string][]int64) (*StorageMeter, *Ledger, *storedUsage) {
	t.Helper()
	l := NewLedger()
	regs, _ := BuiltIns()
	for i := range regs {
		l.SetRegistration(&regs[i])
	}
	if grants != nil {
		l.SetGrant(grantOf("organization-acme", "g", web, grants))
	}
	s := &storedUsage{of: stored}
	ids := map[string]string{"web": tenancy.ProjectID("web-1")}
	return NewStorageMeter(l, s.load, func(name string) string { return ids[name] }), l, s
}

var webTenant = tenancy.Tenant{Kind: tenancy.Project, Name: "web", ID: tenancy.ProjectID("web-1")}

func write(t *testing.T, m *StorageMeter, tenant tenancy.Tenant, objects, bytes int64, stored bool) error {
	t.Helper()
	w, err := m.Begin(context.Background(), tenant, false)
	if err != nil {
		t.Fatal(err)
	}
	if w == nil {
		return errors.New("not metered")
	}
	err = w.Charge(objects, bytes, true)
	w.End(stored && err == nil)
	return err
}

func TestStorageMeterChargesOnlyGrantedProjects(t *testing.T) {
	m, l, s := meteredLedger(t, map[string]Usage{webTenant.ID: {Objects: 3, Bytes: 300}}, nil)
	if w, err := m.Begin(context.Background(), webTenant, false); w != nil || err != nil {
		t.Fatalf("a project without a grant is metered: %v, %v", w, err)
	}
	if s.loads.Load() != 0 {
		t.Fatal("a project without a grant was read")
	}
	l.SetGrant(grantOf("organization-acme", "g", web, map[string][]int64{ObjectsPerProject: {5}}))
	// The stored 3 objects are read once, at the first write; bytes are not.
	for range 2 {
		if err := write(t, m, webTenant, 1, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	var exceeded *Exceeded
	if err := write(t, m, webTenant, 1, 0, true); !errors.As(err, &exceeded) || exceeded.Limit != 5 || exceeded.Used != 5 {
		t.Fatalf("sixth object: %v", err)
	}
	if n := s.loads.Load(); n != 1 {
		t.Fatalf("read %d times, want once", n)
	}
	if b := l.Bucket(BucketKey{web, ObjectsPerProject}); b.Allocated != 5 || b.Available != 0 || !b.Exists {
		t.Fatalf("objects bucket %+v", b)
	}
	if b := l.Bucket(BucketKey{web, BytesPerProject}); b.Exists || b.Allocated != 0 {
		t.Fatalf("bytes are counted without a grant for them: %+v", b)
	}
	// A failed write gives back what it took; a delete frees.
	if err := write(t, m, webTenant, -1, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := write(t, m, webTenant, -1, 0, true); err != nil {
		t.Fatal(err)
	}
	if b := l.Bucket(BucketKey{web, ObjectsPerProject}); b.Allocated != 4 {
		t.Fatalf("after a failed and a stored delete: %+v", b)
	}
	// The grant gone, the project is metered no more and its counts go.
	l.DeleteGrant("organization-acme", "g")
	if w, _ := m.Begin(context.Background(), webTenant, false); w != nil {
		t.Fatal("metered without a grant")
	}
	if n := l.metered[ObjectsPerProject][web]; n != 0 {
		t.Fatalf("a project metered no more keeps its count %d", n)
	}
}

// Fifty writers, ten objects free: exactly ten are stored, whatever the
// interleaving, and the project is read from storage once.
func TestStorageMeterLastUnitsGoToExactlyTheLimit(t *testing.T) {
	m, l, s := meteredLedger(t, map[string]Usage{webTenant.ID: {Objects: 90}}, map[string][]int64{ObjectsPerProject: {100}})
	var wg sync.WaitGroup
	var won atomic.Int32
	for range 50 {
		wg.Go(func() {
			w, err := m.Begin(context.Background(), webTenant, false)
			if err != nil || w == nil {
				t.Error(w, err)
				return
			}
			if w.Charge(1, 0, true) == nil {
				won.Add(1)
			}
			w.End(true)
		})
	}
	wg.Wait()
	if won.Load() != 10 || s.loads.Load() != 1 {
		t.Fatalf("%d writes won, %d reads", won.Load(), s.loads.Load())
	}
	if b := l.Bucket(BucketKey{web, ObjectsPerProject}); b.Allocated != 100 {
		t.Fatalf("bucket %+v", b)
	}
}

func TestStorageMeterBytes(t *testing.T) {
	m, l, _ := meteredLedger(t, map[string]Usage{webTenant.ID: {Objects: 2, Bytes: 400}}, map[string][]int64{BytesPerProject: {1000}})
	w, err := m.Begin(context.Background(), webTenant, false)
	if err != nil || w == nil || !w.Sizes() {
		t.Fatalf("bytes granted, sizes not wanted: %v %v", w, err)
	}
	// A retried update charges its last attempt: 500, then 700 (refused: 400+700 > 1000), then 550.
	if err := w.Charge(0, 500, true); err != nil {
		t.Fatal(err)
	}
	var exceeded *Exceeded
	if err := w.Charge(0, 700, true); !errors.As(err, &exceeded) || exceeded.Used != 900 || exceeded.Amount != 200 || exceeded.Unit != "byte" {
		t.Fatalf("growing past the limit: %v", err)
	}
	if err := w.Charge(0, 550, true); err != nil {
		t.Fatal(err)
	}
	w.End(true)
	b := l.Bucket(BucketKey{web, BytesPerProject})
	if b.Allocated != 950 || b.Available != 50 || b.ClaimCount != 2 {
		t.Fatalf("bytes bucket %+v (claims: the objects)", b)
	}
	// The server's writes are charged past the limit, not refused.
	w, _ = m.Begin(context.Background(), webTenant, false)
	if err := w.Charge(1, 200, false); err != nil {
		t.Fatal(err)
	}
	w.End(true)
	if b := l.Bucket(BucketKey{web, BytesPerProject}); b.Allocated != 1150 || b.Available != 0 {
		t.Fatalf("after an unrefusable write: %+v", b)
	}
}

// A recycled name is another project: nothing the old one stored counts,
// and a project read again after an invalidation counts what storage holds.
func TestStorageMeterRecycledNameAndInvalidation(t *testing.T) {
	reborn := tenancy.Tenant{Kind: tenancy.Project, Name: "web", ID: tenancy.ProjectID("web-2")}
	m, l, s := meteredLedger(t, map[string]Usage{webTenant.ID: {Objects: 7}, reborn.ID: {}}, map[string][]int64{ObjectsPerProject: {10}})
	if err := write(t, m, webTenant, 1, 0, true); err != nil {
		t.Fatal(err)
	}
	if b := l.Bucket(BucketKey{web, ObjectsPerProject}); b.Allocated != 8 {
		t.Fatalf("bucket %+v", b)
	}
	if err := write(t, m, reborn, 1, 0, true); err != nil {
		t.Fatal(err)
	}
	if b := l.Bucket(BucketKey{web, ObjectsPerProject}); b.Allocated != 1 || s.loads.Load() != 2 {
		t.Fatalf("the recycled name's bucket %+v after %d reads", b, s.loads.Load())
	}
	m.ProjectGone("web", webTenant.ID) // the old project's late delete event: not the new one's
	if b := l.Bucket(BucketKey{web, ObjectsPerProject}); b.Allocated != 1 {
		t.Fatalf("the old project's deletion reset the new one: %+v", b)
	}
	s.mu.Lock()
	s.of[reborn.ID] = Usage{Objects: 4}
	s.mu.Unlock()
	m.Invalidate()
	m.idOf = func(string) string { return reborn.ID }
	if err := m.Ensure(context.Background(), "web"); err != nil {
		t.Fatal(err)
	}
	if b := l.Bucket(BucketKey{web, ObjectsPerProject}); b.Allocated != 4 || s.loads.Load() != 3 {
		t.Fatalf("after invalidation: %+v, %d reads", b, s.loads.Load())
	}
	m.ProjectGone("web", reborn.ID)
	if b := l.Bucket(BucketKey{web, ObjectsPerProject}); b.Allocated != 0 {
		t.Fatalf("a deleted project keeps its count: %+v", b)
	}
}

// A delete never waits for the project's usage to be read (it charges
// nothing then: the read, later, finds the object gone); and a bytes count
// not kept while bytes were not metered is read again when they are.
func TestStorageMeterReleasesAndStaleBytes(t *testing.T) {
	m, l, s := meteredLedger(t, map[string]Usage{webTenant.ID: {Objects: 5, Bytes: 500}}, map[string][]int64{ObjectsPerProject: {10}, BytesPerProject: {1000}})
	w, err := m.Begin(context.Background(), webTenant, true)
	if err != nil || w == nil || w.Sizes() {
		t.Fatalf("a release on an unread project: %v %v", w, err)
	}
	if err := w.Charge(-1, -100, false); err != nil {
		t.Fatal(err)
	}
	w.End(true)
	if s.loads.Load() != 0 {
		t.Fatal("a release read the project's usage")
	}
	if err := write(t, m, webTenant, 1, 100, true); err != nil {
		t.Fatal(err)
	}
	if b := l.Bucket(BucketKey{web, BytesPerProject}); b.Allocated != 600 || s.loads.Load() != 1 {
		t.Fatalf("after the first write: %+v, %d reads", b, s.loads.Load())
	}
	// Bytes no longer granted: writes charge none; granted again, read again.
	l.SetGrant(grantOf("organization-acme", "g", web, map[string][]int64{ObjectsPerProject: {10}}))
	if err := write(t, m, webTenant, 1, 300, true); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.of[webTenant.ID] = Usage{Objects: 7, Bytes: 900}
	s.mu.Unlock()
	l.SetGrant(grantOf("organization-acme", "g", web, map[string][]int64{ObjectsPerProject: {10}, BytesPerProject: {1000}}))
	if err := write(t, m, webTenant, 0, 200, true); !errors.As(err, new(*Exceeded)) {
		t.Fatalf("200 bytes more on 900 read again, limit 1000: %v", err)
	}
	if s.loads.Load() != 2 {
		t.Fatalf("%d reads, want the bytes read again", s.loads.Load())
	}
}

// A project's objects counted in storage: the guard of a create expects
// the count as this server last knew it, counts the project once in each
// epoch before trusting it (here and in every other server), decides from
// what the count holds when it moved, and refuses past the limit; the
// bucket follows the count; a write whose resource the count's
// transactions cannot reach is charged here instead.
func TestStorageMeterGuardsTheCountInStorage(t *testing.T) {
	m, l, _ := meteredLedger(t, map[string]Usage{webTenant.ID: {Objects: 1}}, map[string][]int64{ObjectsPerProject: {4}})
	var counts atomic.Int32
	inStorage := tenantstorage.Tally{Revision: 5, Value: 2, Keep: true}
	m.CountInStorage(StorageCounts{Count: func(_ context.Context, id, key, bytesKey string) (tenantstorage.Tally, tenantstorage.Tally, error) {
		counts.Add(1)
		if id != webTenant.ID || key != tenantstorage.UsageTallyKey(id, l.usageEpoch(web)) || bytesKey != "" {
			t.Errorf("counted %s into %s and %q", id, key, bytesKey)
		}
		out := inStorage
		out.Key = key
		return out, tenantstorage.Tally{}, nil
	}})
	begin := func() tenantstorage.TalliedWrite { return talliedWrite(t, m, false) }
	w := begin()
	// Objects are the count's to charge, not Charge's.
	if err := w.Charge(1, 0, true); err != nil {
		t.Fatal(err)
	}
	g := w.Guard(1, 0, true)
	if e := g.Expect(nil); len(e) != 1 || e[0].Revision != -1 || e[0].Add != 1 || !e[0].Keep {
		t.Fatalf("a count never read is expected as %+v, want a forced read", e)
	}
	// Another server wrote it: this one counts all the same, once.
	if err := g.Moved([]tenantstorage.Tally{{Key: w.ObjectsTally(), Revision: 4, Value: 9, Keep: true}}); err != nil || counts.Load() != 1 {
		t.Fatalf("the count first seen: %v, counted %d times", err, counts.Load())
	}
	e := g.Expect(nil)
	if e[0].Revision != 5 || e[0].Value != 2 {
		t.Fatalf("after counting, the count is expected as %+v", e[0])
	}
	g.Stored(storedAt(e, 6))
	w.End(true)
	bucketIs := func(want int64) {
		t.Helper()
		l.mu.RLock()
		defer l.mu.RUnlock()
		if got := l.allocatedLocked(BucketKey{web, ObjectsPerProject}); got != want {
			t.Fatalf("the bucket counts %d objects, want %d", got, want)
		}
	}
	bucketIs(3)
	// Known now: the next create expects revision 6 and 3; another
	// server's create moved it to 4, so it decides again and is refused.
	w = begin()
	g = w.Guard(1, 0, true)
	if e := g.Expect(nil); e[0].Revision != 6 || e[0].Value != 3 {
		t.Fatalf("the count expected as %+v, want 3 at 6", e[0])
	}
	// Committed after another create in one transaction, it no longer
	// fits the limit of 4: a revision no key has, to be decided alone.
	if e := g.Expect([]int64{1}); e[0].Revision != -1 {
		t.Fatalf("the count expected after another create as %+v, want a forced read", e[0])
	}
	var refused tenantstorage.Refused
	var exceeded *Exceeded
	if err := g.Moved([]tenantstorage.Tally{{Key: w.ObjectsTally(), Revision: 8, Value: 4, Keep: true}}); !errors.As(err, &refused) || !errors.As(err, &exceeded) ||
		exceeded.Limit != 4 || exceeded.Used != 4 || counts.Load() != 1 {
		t.Fatalf("a create past the limit: %v (counted %d times)", err, counts.Load())
	}
	w.End(false)
	bucketIs(4)
	// Full as known: a forced read rather than a doomed write. A write the
	// server cannot refuse goes on.
	if e := begin().Guard(1, 0, true).Expect(nil); e[0].Revision != -1 {
		t.Fatalf("a full count expected as %+v", e[0])
	}
	if e := begin().Guard(1, 0, false).Expect(nil); e[0].Revision != 8 {
		t.Fatalf("a full count, for a write never refused, expected as %+v", e[0])
	}
	// A changed grant is a new epoch: a new key, counted again.
	old := begin().ObjectsTally()
	l.SetGrant(grantOf("organization-acme", "g2", web, map[string][]int64{ObjectsPerProject: {1}}))
	w = begin()
	if w.ObjectsTally() == old {
		t.Fatal("a new grant kept the count's epoch")
	}
	g = w.Guard(1, 0, true)
	if e := g.Expect(nil); e[0].Revision != -1 {
		t.Fatalf("a new epoch's count expected as %+v", e[0])
	}
	if err := g.Moved([]tenantstorage.Tally{{Key: w.ObjectsTally()}}); err != nil || counts.Load() != 2 {
		t.Fatalf("a new epoch's absent count: %v, counted %d times", err, counts.Load())
	}
	// A delete's report of an absent count teaches nothing.
	w.Learn(tenantstorage.Tally{Key: w.ObjectsTally()})
	bucketIs(2)
	// Kept where the count's transactions do not reach: charged here.
	w = begin()
	w.Untallied()
	if w.ObjectsTally() != "" {
		t.Fatal("an untallied write still names the count")
	}
	if err := w.Charge(1, 0, true); err != nil {
		t.Fatal(err)
	}
	w.End(true)
	bucketIs(3)
}

// A project's bytes limited too: they are counted in a tally of their own
// beside its objects', which every write moves by what it adds (a create
// its size, an update its growth); the guard refuses growth past the
// bytes limit from what the tally holds, and the bucket follows it.
func TestStorageMeterGuardsTheBytesInStorage(t *testing.T) {
	m, l, _ := meteredLedger(t, map[string]Usage{webTenant.ID: {Objects: 1, Bytes: 100}}, map[string][]int64{BytesPerProject: {1000}})
	var counts atomic.Int32
	m.CountInStorage(StorageCounts{Count: func(_ context.Context, id, key, bytesKey string) (tenantstorage.Tally, tenantstorage.Tally, error) {
		counts.Add(1)
		epoch := l.usageEpoch(web)
		if key != tenantstorage.UsageTallyKey(id, epoch) || bytesKey != tenantstorage.BytesTallyKey(id, epoch) {
			t.Errorf("counted into %s and %q", key, bytesKey)
		}
		return tenantstorage.Tally{Key: key, Revision: 5, Value: 3, Keep: true}, tenantstorage.Tally{Key: bytesKey, Revision: 5, Value: 600, Keep: true}, nil
	}})
	begin := func() tenantstorage.TalliedWrite { return talliedWrite(t, m, true) }
	bytesAre := func(want int64) {
		t.Helper()
		l.mu.RLock()
		defer l.mu.RUnlock()
		if got := l.allocatedLocked(BucketKey{web, BytesPerProject}); got != want {
			t.Fatalf("the bucket counts %d bytes, want %d", got, want)
		}
	}
	w := begin()
	// Bytes are the tally's to charge: Charge neither counts nor refuses them.
	if err := w.Charge(1, 5000, true); err != nil {
		t.Fatal(err)
	}
	g := w.Guard(1, 300, true)
	if e := g.Expect(nil); len(e) != 2 || e[1].Key != w.BytesTally() || e[1].Add != 300 || e[1].Revision != -1 {
		t.Fatalf("a create of 300 bytes, never counted, expects %+v", e)
	}
	if err := g.Moved([]tenantstorage.Tally{{Key: w.ObjectsTally()}, {Key: w.BytesTally()}}); err != nil || counts.Load() != 1 {
		t.Fatalf("the tallies first seen: %v, counted %d times", err, counts.Load())
	}
	bytesAre(600)
	e := g.Expect(nil)
	if e[0].Revision != 5 || e[1].Revision != 5 || e[1].Value != 600 {
		t.Fatalf("after counting, expected %+v", e)
	}
	g.Stored(storedAt(e, 6))
	w.End(true)
	bytesAre(900)
	// 200 more on 900 of 1000 (an update: no object more, so only the
	// bytes tally is moved): full as known, so read; another replica freed
	// 500 meanwhile, so it fits.
	w = begin()
	g = w.Guard(0, 200, true)
	if e := g.Expect(nil); len(e) != 1 || e[0].Key != w.BytesTally() || e[0].Revision != -1 {
		t.Fatalf("growth past the limit as known expects %+v, want a forced read of the bytes tally alone", e)
	}
	if err := g.Moved([]tenantstorage.Tally{{Key: w.BytesTally(), Revision: 7, Value: 400, Keep: true}}); err != nil {
		t.Fatalf("200 bytes on 400 of 1000: %v", err)
	}
	bytesAre(400)
	e = g.Expect(nil)
	if e[0].Revision != 7 || e[0].Value != 400 {
		t.Fatalf("after the read, expected %+v", e)
	}
	g.Stored(storedAt(e, 8))
	w.End(true)
	bytesAre(600)
	// Another replica's writes fill it: refused, naming bytes.
	w = begin()
	g = w.Guard(0, 500, true)
	g.Expect(nil)
	var exceeded *Exceeded
	if err := g.Moved([]tenantstorage.Tally{{Key: w.BytesTally(), Revision: 9, Value: 700, Keep: true}}); !errors.As(err, &exceeded) ||
		exceeded.Bucket.ResourceType != BytesPerProject || exceeded.Used != 700 || exceeded.Amount != 500 {
		t.Fatalf("500 bytes on 700 of 1000: %v", err)
	}
	w.End(false)
	bytesAre(700)
	// A shrink is never refused, nor is a write the server cannot refuse;
	// a write that keeps the size moves no tally.
	if e := begin().Guard(0, -300, true).Expect(nil); len(e) != 1 || e[0].Revision != 9 || e[0].Add != -300 {
		t.Fatalf("a shrink expects %+v", e)
	}
	if e := begin().Guard(0, 900, false).Expect(nil); e[0].Revision != 9 {
		t.Fatalf("growth never refused expects %+v", e)
	}
	if e := begin().Guard(0, 0, true).Expect(nil); len(e) != 0 {
		t.Fatalf("a write of the same size expects %+v", e)
	}
	if counts.Load() != 1 {
		t.Fatalf("counted %d times, want once", counts.Load())
	}
}

// talliedWrite begins a write of project web, which must be counted in
// storage (its bytes too, when bytes).
func talliedWrite(t *testing.T, m *StorageMeter, bytes bool) tenantstorage.TalliedWrite {
	t.Helper()
	w, err := m.Begin(context.Background(), webTenant, false)
	if err != nil {
		t.Fatal(err)
	}
	tw, ok := w.(tenantstorage.TalliedWrite)
	if !ok || tw.ObjectsTally() == "" || (bytes && tw.BytesTally() == "") {
		t.Fatalf("a project with a grant is not counted in storage (bytes: %v)", bytes)
	}
	return tw
}

// Writes of one project on one server that all find its counts unknown
// count it once between them: the first counts, the others wait for its
// count and take its outcome, a failure too.
func TestStorageMeterCountsOnceForConcurrentWrites(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("count fails=%v", fail), func(t *testing.T) {
			const writes = 8
			m, _, _ := meteredLedger(t, map[string]Usage{webTenant.ID: {Objects: 1}}, map[string][]int64{ObjectsPerProject: {100}})
			var counts atomic.Int32
			var expected sync.WaitGroup
			expected.Add(writes)
			m.CountInStorage(StorageCounts{Count: func(_ context.Context, _, key, _ string) (tenantstorage.Tally, tenantstorage.Tally, error) {
				counts.Add(1)
				expected.Wait() // every write expected the counts before this count ends
				if fail {
					return tenantstorage.Tally{}, tenantstorage.Tally{}, errors.New("etcd is away")
				}
				return tenantstorage.Tally{Key: key, Revision: 5, Value: 1, Keep: true}, tenantstorage.Tally{}, nil
			}})
			var wg sync.WaitGroup
			errs := make([]error, writes)
			for i := range writes {
				wg.Go(func() {
					w := talliedWrite(t, m, false)
					defer w.End(false)
					g := w.Guard(1, 0, true)
					e := g.Expect(nil)
					expected.Done()
					if e[0].Revision != -1 {
						errs[i] = fmt.Errorf("expected %+v before any count", e[0])
						return
					}
					errs[i] = g.Moved([]tenantstorage.Tally{{Key: w.ObjectsTally()}})
				})
			}
			wg.Wait()
			for i, err := range errs {
				if fail != (err != nil) || (fail && !apierrors.IsServiceUnavailable(err)) {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			if counts.Load() != 1 {
				t.Fatalf("%d writes counted the project %d times, want once", writes, counts.Load())
			}
		})
	}
}

// storedAt is what tallies expected as in e hold once a transaction
// committed at revision moved them.
func storedAt(e []tenantstorage.Tally, revision int64) []tenantstorage.Tally {
	now := make([]tenantstorage.Tally, len(e))
	for i, t := range e {
		now[i] = tenantstorage.Tally{Key: t.Key, Revision: revision, Value: t.Value + t.Add, Keep: t.Keep}
	}
	return now
}
