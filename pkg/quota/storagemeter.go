package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

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

	mu       sync.RWMutex
	projects map[string]*meteredProject // by project name
}

// meteredProject is one metered project.
type meteredProject struct {
	id string
	// writes is held shared by every write in progress (from its charge to
	// its end, never across admission) and exclusively by a load, so a
	// load sees no write half done.
	writes sync.RWMutex
	// objects and bytes say which of the project's counts were read from
	// storage and kept current since; set under writes held exclusively,
	// cleared by anyone (an invalidation, bytes no longer metered).
	objects, bytes atomic.Bool
}

// NewStorageMeter returns a meter charging ledger; load reads a project's
// usage from storage and idOf resolves a project's name to its storage id.
func NewStorageMeter(ledger *Ledger, load UsageLoader, idOf func(name string) string) *StorageMeter {
	ledger.Meter(ObjectsPerProject)
	ledger.Meter(BytesPerProject)
	return &StorageMeter{ledger: ledger, load: load, idOf: idOf, projects: map[string]*meteredProject{}}
}

var _ tenantstorage.Meter = (*StorageMeter)(nil)

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
	if err := m.hold(ctx, p, c, bytes, !release); err != nil {
		return nil, err
	}
	// A release charges only what was read from storage: what was not is
	// read later, without the freed object.
	return &meteredWrite{ledger: m.ledger, p: p, consumer: c, objects: p.objects.Load(), sizes: bytes && p.bytes.Load()}, nil
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
	if err := m.hold(ctx, p, c, bytes, true); err != nil {
		return err
	}
	p.writes.RUnlock()
	return nil
}

// hold returns with p's writes held shared and, when load, its counts
// read from storage (its bytes too, when bytes are metered).
func (m *StorageMeter) hold(ctx context.Context, p *meteredProject, c Consumer, bytes, load bool) error {
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
	p = &meteredProject{id: id}
	m.projects[name] = p
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
	}
}

// meteredWrite is one write of a metered project, holding its writes shared.
type meteredWrite struct {
	ledger   *Ledger
	p        *meteredProject
	consumer Consumer
	// objects and sizes: which counts the write charges (those read from storage).
	objects, sizes bool
	charged        Usage
	ended          bool
}

func (w *meteredWrite) Sizes() bool { return w.sizes }

func (w *meteredWrite) Charge(objects, bytes int64, refusable bool) error {
	if !w.objects {
		objects = 0
	}
	if !w.sizes {
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
