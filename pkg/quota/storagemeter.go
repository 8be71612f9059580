package quota

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Usage is what a project stores, read from storage: its objects (Events,
// which expire on their own, aside) and their bytes as stored.
type Usage struct {
	Objects, Bytes int64
}

// UsageLoader reads a project's usage from storage by its storage id;
// bytes says whether its bytes are wanted too (they cost reading every
// value, objects only counting keys).
type UsageLoader func(ctx context.Context, projectID string, bytes bool) (Usage, error)

// StorageMeter meters what projects store for the built-in resource types
// ObjectsPerProject and BytesPerProject. The storage layer tells it of
// every write of a project's objects (tenantstorage.Meter); it charges the
// ledger's counts for the project, refusing growth past the project's limit,
// under the ledger's one lock, so concurrent writers can never both take
// the last unit.
//
// Only a project with a grant for one of the types is metered: for any
// other a write costs two map reads. A metered project's usage is read
// from storage once, at its first write (or when its bucket is written),
// with the project's writes held meanwhile, and kept current from then on
// by its writes; what the server holds per metered project is one entry.
type StorageMeter struct {
	ledger *Ledger
	load   UsageLoader
	// idOf returns a project's storage id, "" when the project is not known.
	idOf func(name string) string
	// count, when set, counts a project's objects into its usage tally
	// (tenantstorage.CountUsage): its objects are then counted in storage,
	// by the transactions of every replica (see CountInStorage).
	count UsageCounter
	// follow and drop: see StorageCounts.
	follow func(ctx context.Context, seen func(projectID, epoch string, now tenantstorage.Tally))
	drop   func(ctx context.Context) error

	mu       sync.RWMutex
	projects map[string]*meteredProject // by project name
	byID     map[string]*meteredProject // the same, by storage id
}

// meteredProject is one metered project.
type meteredProject struct {
	name, id string
	// writes is held shared by every write in progress (from its charge to
	// its end, never across admission) and exclusively by a load, so a
	// load sees no write half done.
	writes sync.RWMutex
	// objects and bytes say which of the project's counts were read from
	// storage and kept current since; set under writes held exclusively,
	// cleared by anyone (an invalidation, bytes no longer metered).
	objects, bytes atomic.Bool

	// The project's usage tally, where objects are counted in storage.
	tallyMu sync.Mutex
	// epoch is the tally's epoch the server knows of ("": none), tally
	// what it last knew the tally to hold; counted is the epoch this
	// server counted the project in: each server counts once in each
	// epoch before it trusts the tally, so objects a server stored
	// before it knew of the epoch's grants are counted too.
	epoch, counted string
	tally          tenantstorage.Tally
	// bytesTally is what the server last knew the tally of the project's
	// bytes to hold, where they are limited (kept beside its objects').
	bytesTally tenantstorage.Tally
	// count lets one write count the project at a time (its n and err
	// under tallyMu).
	count oneCount
	// recount says the tally must be counted again before it is trusted:
	// objects were removed behind the storage layer's back.
	recount atomic.Bool
}

// NewStorageMeter returns a meter charging ledger; load reads a project's
// usage from storage and idOf resolves a project's name to its storage id.
func NewStorageMeter(ledger *Ledger, load UsageLoader, idOf func(name string) string) *StorageMeter {
	ledger.Meter(ObjectsPerProject)
	ledger.Meter(BytesPerProject)
	return &StorageMeter{ledger: ledger, load: load, idOf: idOf, projects: map[string]*meteredProject{}, byID: map[string]*meteredProject{}}
}

var _ tenantstorage.Meter = (*StorageMeter)(nil)

// UsageCounter counts the objects of the project with storage id projectID
// directly in storage and writes the count into the usage tally at key,
// and, when bytesKey is set, their bytes into the tally at bytesKey (see
// tenantstorage.CountUsage), returning them as written.
type UsageCounter func(ctx context.Context, projectID, key, bytesKey string) (objects, bytes tenantstorage.Tally, _ error)

// StorageCounts is how a meter keeps projects' object counts in storage.
type StorageCounts struct {
	// Count counts a project's objects into its usage tally.
	Count UsageCounter
	// Follow watches every project's usage tally until ctx ends, telling
	// seen what each holds when written.
	Follow func(ctx context.Context, seen func(projectID, epoch string, now tenantstorage.Tally))
	// Drop deletes every project's usage tally: each is counted again at
	// its project's next create.
	Drop func(ctx context.Context) error
}

// CountInStorage makes the meter count each project's objects in storage
// (on etcd), where every replica of the server moves the count in the
// transactions that create and delete the objects, so that replicas
// sharing the storage cannot together store more than a project's limit.
// Without it each replica counts the writes it serves. Call it before the
// meter is used.
func (m *StorageMeter) CountInStorage(c StorageCounts) {
	if m != nil {
		m.count, m.follow, m.drop = c.Count, c.Follow, c.Drop
	}
}

// FollowCounts keeps the counts of the projects this server meters as
// every replica's writes leave their tallies in storage, until ctx ends:
// their buckets then show what other replicas stored too.
func (m *StorageMeter) FollowCounts(ctx context.Context) {
	if m == nil || m.follow == nil {
		return
	}
	m.follow(ctx, func(projectID, epoch string, now tenantstorage.Tally) {
		m.mu.RLock()
		p := m.byID[projectID]
		m.mu.RUnlock()
		if p == nil {
			return // not metered here: read when it is
		}
		c := Consumer{Kind: KindProject, Name: p.name}
		objects, bytes := m.ledger.limited(c)
		if (!objects && !bytes) || m.ledger.usageEpoch(c) != epoch {
			return
		}
		(&meteredWrite{ledger: m.ledger, p: p, consumer: c, epoch: epoch, bytesTallied: bytes}).Learn(now)
	})
}

// Begin implements tenantstorage.Meter.
func (m *StorageMeter) Begin(ctx context.Context, t tenancy.Tenant, release bool) (tenantstorage.MeteredWrite, error) {
	if m == nil {
		return nil, nil
	}
	c := Consumer{Kind: KindProject, Name: t.Name}
	objects, bytes := m.ledger.limited(c)
	if !objects && !bytes {
		m.forget(t.Name, "")
		return nil, nil
	}
	p := m.entry(t.Name, t.ID)
	var epoch string
	if m.count != nil {
		// Every write moves the tallies, a release too, whether or not
		// this server has read them yet: they are every replica's.
		epoch = m.ledger.usageEpoch(c)
	}
	if err := m.hold(ctx, p, c, bytes, !release, epoch != ""); err != nil {
		return nil, err
	}
	// A release charges only what was read from storage: what was not is
	// read later, without the freed object.
	return &meteredWrite{ctx: ctx, m: m, ledger: m.ledger, p: p, consumer: c, objects: p.objects.Load(), sizes: bytes && p.bytes.Load(),
		epoch: epoch, bytesTallied: epoch != "" && bytes}, nil
}

// Ensure reads the named project's usage from storage if it is metered
// and not read yet, so its buckets show what it stores.
func (m *StorageMeter) Ensure(ctx context.Context, name string) error {
	if m == nil {
		return nil
	}
	c := Consumer{Kind: KindProject, Name: name}
	objects, bytes := m.ledger.limited(c)
	id := m.idOf(name)
	if (!objects && !bytes) || id == "" {
		return nil
	}
	p := m.entry(name, id)
	if err := m.hold(ctx, p, c, bytes, true, m.count != nil); err != nil {
		return err
	}
	p.writes.RUnlock()
	return nil
}

// hold returns with p's writes held shared and, when load, its counts
// read from storage (its bytes too, when bytes are metered). tallied says
// its objects are counted in storage: what the tally holds stands.
func (m *StorageMeter) hold(ctx context.Context, p *meteredProject, c Consumer, bytes, load, tallied bool) error {
	ready := func() bool { return p.objects.Load() && (!bytes || p.bytes.Load()) }
	for {
		p.writes.RLock()
		if !bytes {
			// Writes now charge no bytes: the count goes stale, and is
			// read again if bytes are metered again.
			p.bytes.Store(false)
		}
		if !load || ready() {
			return nil
		}
		p.writes.RUnlock()
		p.writes.Lock()
		if ready() {
			p.writes.Unlock()
			continue
		}
		u, err := m.load(ctx, p.id, bytes)
		if err != nil {
			p.writes.Unlock()
			return apierrors.NewServiceUnavailable(fmt.Sprintf("reading what project %s stores, for its quota: %v", c.Name, err))
		}
		if tallied {
			p.tallyMu.Lock()
			if p.tally.Revision > 0 {
				u.Objects = p.tally.Value
			}
			if bytes && p.bytesTally.Revision > 0 {
				u.Bytes = p.bytesTally.Value
			}
			p.tallyMu.Unlock()
		}
		m.ledger.setMetered(c, u, bytes)
		p.objects.Store(true)
		p.bytes.Store(bytes)
		p.writes.Unlock()
	}
}

// entry returns the project's entry, a new one where the name's project
// has another storage id (a recycled name: nothing of the old one counts).
func (m *StorageMeter) entry(name, id string) *meteredProject {
	m.mu.RLock()
	p, ok := m.projects[name]
	m.mu.RUnlock()
	if ok && p.id == id {
		return p
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.projects[name]; ok && p.id == id {
		return p
	}
	if old, ok := m.projects[name]; ok {
		delete(m.byID, old.id)
	}
	p = &meteredProject{name: name, id: id}
	m.projects[name] = p
	m.byID[id] = p
	return p
}

// forget drops the named project's entry and counts (of storage id id, or
// whichever it has when id is ""): it is no longer metered, or gone.
func (m *StorageMeter) forget(name, id string) {
	m.mu.RLock()
	p, ok := m.projects[name]
	m.mu.RUnlock()
	if !ok || (id != "" && p.id != id) {
		return
	}
	m.mu.Lock()
	if q, ok := m.projects[name]; ok && q == p {
		delete(m.projects, name)
		delete(m.byID, p.id)
	}
	m.mu.Unlock()
	m.ledger.setMetered(Consumer{Kind: KindProject, Name: name}, Usage{}, true)
}

// ProjectGone forgets a deleted project (name, storage id).
func (m *StorageMeter) ProjectGone(name, id string) {
	if m != nil {
		m.forget(name, id)
	}
}

// Invalidate makes every metered project's usage be read from storage
// again: objects were removed behind the storage layer's back (a CRD's
// instances purged in storage). Writes in progress finish first: a load
// waits for them.
func (m *StorageMeter) Invalidate() {
	if m == nil {
		return
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, p := range m.projects {
		p.objects.Store(false)
		p.bytes.Store(false)
		p.recount.Store(true)
	}
	if m.drop != nil {
		// Every replica's counts, not only those of the projects this
		// server meters: each is counted again at its next create.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.drop(ctx); err != nil {
			klog.ErrorS(err, "Dropping the object counts of projects after objects were removed in storage: they stay as they were, too high")
		}
	}
}

// meteredWrite is one write of a metered project, holding its writes shared.
type meteredWrite struct {
	ctx      context.Context
	m        *StorageMeter
	ledger   *Ledger
	p        *meteredProject
	consumer Consumer
	// objects and sizes: which counts the write charges (those read from storage).
	objects, sizes bool
	charged        Usage
	ended          bool
	// epoch is the usage tally's, when the project's objects are counted
	// in storage: they are then charged through it, not by Charge; so are
	// its bytes when bytesTallied.
	epoch        string
	bytesTallied bool
}

var _ tenantstorage.TalliedWrite = (*meteredWrite)(nil)

func (w *meteredWrite) Sizes() bool { return w.sizes }

func (w *meteredWrite) Charge(objects, bytes int64, refusable bool) error {
	if !w.objects || w.epoch != "" {
		objects = 0
	}
	if !w.sizes || w.bytesTallied {
		bytes = 0
	}
	delta := Usage{Objects: objects - w.charged.Objects, Bytes: bytes - w.charged.Bytes}
	if err := w.ledger.chargeMetered(w.consumer, delta, refusable); err != nil {
		return err
	}
	w.charged = Usage{Objects: objects, Bytes: bytes}
	return nil
}

func (w *meteredWrite) End(stored bool) {
	if w.ended {
		return
	}
	w.ended = true
	if !stored {
		_ = w.ledger.chargeMetered(w.consumer, Usage{Objects: -w.charged.Objects, Bytes: -w.charged.Bytes}, false)
	}
	w.p.writes.RUnlock()
}

// limited reports whether c has a grant in effect for ObjectsPerProject
// and for BytesPerProject.
func (l *Ledger) limited(c Consumer) (objects, bytes bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.grantsOf[c]) == 0 {
		return false, false
	}
	_, og := l.limitLocked(BucketKey{c, ObjectsPerProject})
	_, bg := l.limitLocked(BucketKey{c, BytesPerProject})
	return len(og) > 0, len(bg) > 0
}

// chargeMetered adds u to c's stored objects and bytes, all or nothing:
// growth past a limit is refused with an *Exceeded when refusable.
func (l *Ledger) chargeMetered(c Consumer, u Usage, refusable bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	deltas := [2]struct {
		t      string
		amount int64
	}{{ObjectsPerProject, u.Objects}, {BytesPerProject, u.Bytes}}
	if refusable {
		for _, d := range deltas {
			if d.amount <= 0 {
				continue
			}
			k := BucketKey{c, d.t}
			limit, grants := l.limitLocked(k)
			if len(grants) == 0 {
				continue
			}
			if used := l.allocatedLocked(k) + l.pendingOf[k]; used+d.amount > limit {
				reg, _ := l.validTypeLocked(d.t, c.Kind)
				return &Exceeded{Bucket: k, Limit: limit, Used: used, Amount: d.amount, Unit: reg.baseUnit()}
			}
		}
	}
	for _, d := range deltas {
		if d.amount != 0 {
			l.addMeteredLocked(BucketKey{c, d.t}, d.amount)
		}
	}
	return nil
}

// setMetered sets c's stored objects, and its bytes when bytes.
func (l *Ledger) setMetered(c Consumer, u Usage, bytes bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := func(t string, v int64) {
		k := BucketKey{c, t}
		l.addMeteredLocked(k, v-l.allocatedLocked(k))
	}
	set(ObjectsPerProject, u.Objects)
	if bytes {
		set(BytesPerProject, u.Bytes)
	}
}

func (l *Ledger) addMeteredLocked(k BucketKey, delta int64) {
	counts, ok := l.metered[k.ResourceType]
	if !ok || delta == 0 {
		return
	}
	counts[k.Consumer] += delta
	if counts[k.Consumer] <= 0 {
		delete(counts, k.Consumer)
	}
	l.notify(k)
}

// ObjectsTally implements tenantstorage.TalliedWrite.
func (w *meteredWrite) ObjectsTally() string {
	if w.epoch == "" {
		return ""
	}
	return tenantstorage.UsageTallyKey(w.p.id, w.epoch)
}

// BytesTally implements tenantstorage.TalliedWrite.
func (w *meteredWrite) BytesTally() string {
	if w.epoch == "" || !w.bytesTallied {
		return ""
	}
	return tenantstorage.BytesTallyKey(w.p.id, w.epoch)
}

// Learn implements tenantstorage.TalliedWrite: what a tally holds, kept
// when it is newer than what the server knew, becomes the project's count
// of objects (or bytes) in its bucket.
func (w *meteredWrite) Learn(now tenantstorage.Tally) {
	if now.Revision == 0 || w.epoch == "" {
		return // absent: not counted in this epoch yet, which says nothing
	}
	p := w.p
	p.tallyMu.Lock()
	defer p.tallyMu.Unlock()
	known, other, resourceType := &p.tally, &p.bytesTally, ObjectsPerProject
	if now.Key == tenantstorage.BytesTallyKey(p.id, w.epoch) {
		known, other, resourceType = &p.bytesTally, &p.tally, BytesPerProject
	}
	if p.epoch == w.epoch && now.Revision <= known.Revision {
		return
	}
	if p.epoch != w.epoch {
		// A new epoch: what was known of the other tally is another epoch's.
		p.epoch, *other = w.epoch, tenantstorage.Tally{}
	}
	*known = now
	w.ledger.setMeteredCount(w.consumer, resourceType, now.Value)
}

// Untallied implements tenantstorage.TalliedWrite.
func (w *meteredWrite) Untallied() { w.epoch, w.bytesTallied = "", false }

// Guard implements tenantstorage.TalliedWrite.
func (w *meteredWrite) Guard(objects, bytes int64, refusable bool) tenantstorage.TallyGuard {
	g := &usageGuard{w: w, refusable: refusable}
	// Only the tallies the write moves: a count the write leaves as it is
	// is not rewritten, nor does the write wait for other writes of it.
	if objects != 0 {
		g.adds = append(g.adds, usageAdd{ObjectsPerProject, w.ObjectsTally(), objects})
	}
	if bytes != 0 && w.bytesTallied {
		g.adds = append(g.adds, usageAdd{BytesPerProject, w.BytesTally(), bytes})
	}
	return g
}

// usageGuard keeps a project's usage tallies for one write: it expects
// them as the server last knew them, and when the write fits the limits
// there it is stored with the tallies moved by what it adds; otherwise,
// and when a tally moved, it decides from what the tallies hold.
type usageGuard struct {
	w         *meteredWrite
	adds      []usageAdd
	refusable bool
	// counts is the project's count of counts when the guard last
	// expected: a count made since makes counting again needless.
	counts int64
}

// usageAdd is what a write adds to one of its project's usage tallies.
type usageAdd struct {
	resourceType, key string
	amount            int64
}

func (g *usageGuard) Keys() []string {
	keys := make([]string, len(g.adds))
	for i, a := range g.adds {
		keys[i] = a.key
	}
	return keys
}

// known returns what the server knows the guard's tallies to hold, and
// whether it knows them all in the write's epoch, counted by this server.
func (g *usageGuard) known() ([]tenantstorage.Tally, bool) {
	w, p := g.w, g.w.p
	p.tallyMu.Lock()
	defer p.tallyMu.Unlock()
	g.counts = p.count.n
	known := p.epoch == w.epoch && p.counted == w.epoch && !p.recount.Load()
	out := make([]tenantstorage.Tally, len(g.adds))
	for i, a := range g.adds {
		t := p.tally
		if a.resourceType == BytesPerProject {
			t = p.bytesTally
		}
		out[i] = tenantstorage.Tally{Key: a.key, Revision: t.Revision, Value: t.Value, Add: a.amount, Keep: true}
		known = known && t.Revision > 0
	}
	return out, known
}

func (g *usageGuard) Expect(ahead []int64) []tenantstorage.Tally {
	out, known := g.known()
	if !known || (g.refusable && g.exceeded(out, ahead) != nil) {
		// Unknown, or full as last known: a revision no key has makes the
		// transaction read what the tallies hold, for Moved to decide.
		for i := range out {
			out[i].Revision = -1
		}
	}
	return out
}

// exceeded returns the refusal of the write's growth with the tallies
// holding what now says, and ahead more (the writes committed before it
// in its transaction, if any), or nil when it fits.
func (g *usageGuard) exceeded(now []tenantstorage.Tally, ahead []int64) *Exceeded {
	var used, add Usage
	for i, a := range g.adds {
		v := now[i].Value
		if i < len(ahead) {
			v += ahead[i]
		}
		if a.resourceType == BytesPerProject {
			used.Bytes, add.Bytes = v, a.amount
		} else {
			used.Objects, add.Objects = v, a.amount
		}
	}
	return g.w.ledger.usageExceeded(g.w.consumer, used, add)
}

func (g *usageGuard) Moved(now []tenantstorage.Tally) error {
	w, p := g.w, g.w.p
	for _, t := range now {
		w.Learn(t)
	}
	p.tallyMu.Lock()
	count := p.counted != w.epoch
	p.tallyMu.Unlock()
	for _, t := range now {
		count = count || t.Revision == 0
	}
	if count || p.recount.Load() {
		// Not counted in this epoch yet (by anyone, or by this server), or
		// to be counted again: count.
		if err := g.count(); err != nil {
			return err
		}
	}
	// What the server knows now: what was read, or counted, or newer
	// still (another write of this server stored since).
	now, _ = g.known()
	if g.refusable {
		if e := g.exceeded(now, nil); e != nil {
			return tenantstorage.Refused{Err: e}
		}
	}
	return nil
}

// count counts the project's usage in storage into its tallies, unless
// another write of this server counted it since the guard last expected.
func (g *usageGuard) count() error {
	w, p := g.w, g.w.p
	return p.count.run(&p.tallyMu, g.counts, func() error {
		again := p.recount.Swap(false)
		objects, bytes, err := w.m.count(w.ctx, p.id, w.ObjectsTally(), w.BytesTally())
		if err != nil {
			if again {
				p.recount.Store(true)
			}
			return apierrors.NewServiceUnavailable(fmt.Sprintf("counting what project %s stores, for its quota: %v", w.consumer.Name, err))
		}
		w.Learn(objects)
		w.Learn(bytes)
		return nil
	}, func() { p.counted = w.epoch })
}

func (g *usageGuard) Stored(now []tenantstorage.Tally) {
	for _, t := range now {
		if t.Revision > 0 {
			g.w.Learn(t)
		} else {
			// Taken below nothing: the transaction deleted the tally,
			// which the next write counts again.
			g.w.p.recount.Store(true)
		}
	}
}

// usageEpoch names the grants that limit c's objects and bytes: their
// uids and generations. The usage tallies are counted anew when it
// changes.
func (l *Ledger) usageEpoch(c Consumer) string {
	return l.grantsEpoch(c, ObjectsPerProject, BytesPerProject)
}

// grantsEpoch names the grants that limit c's resource types: their uids
// and generations.
func (l *Ledger) grantsEpoch(c Consumer, types ...string) string {
	l.mu.RLock()
	var named []string
	for _, t := range types {
		_, grants := l.limitLocked(BucketKey{c, t})
		for _, g := range grants {
			named = append(named, fmt.Sprintf("%s/%s/%d;", t, g.uid, g.generation))
		}
	}
	l.mu.RUnlock()
	slices.Sort(named)
	h := fnv.New64a()
	for _, n := range named {
		h.Write([]byte(n))
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

// usageExceeded returns the refusal of a write adding add to c's stored
// objects and bytes, with used stored, or nil when what it adds fits (or
// nothing limits it).
func (l *Ledger) usageExceeded(c Consumer, used, add Usage) *Exceeded {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, d := range []struct {
		t          string
		used, more int64
	}{{ObjectsPerProject, used.Objects, add.Objects}, {BytesPerProject, used.Bytes, add.Bytes}} {
		if d.more <= 0 {
			continue
		}
		k := BucketKey{c, d.t}
		limit, grants := l.limitLocked(k)
		if len(grants) == 0 || d.used+d.more <= limit {
			continue
		}
		reg, _ := l.validTypeLocked(d.t, c.Kind)
		return &Exceeded{Bucket: k, Limit: limit, Used: d.used, Amount: d.more, Unit: reg.baseUnit()}
	}
	return nil
}

// setMeteredCount sets c's stored objects or bytes (resourceType) to n,
// as counted in storage.
func (l *Ledger) setMeteredCount(c Consumer, resourceType string, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := BucketKey{c, resourceType}
	l.addMeteredLocked(k, n-l.allocatedLocked(k))
}
