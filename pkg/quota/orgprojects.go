package quota

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenancy"
)

// projectsTallies is where organizations' Projects are counted in storage.
const projectsTallies = "_milo/quota-projects/"

// ProjectsTallyKey is where org's Projects are counted in storage (under
// the storage prefix) while the grants that limit them are those epoch
// names.
func ProjectsTallyKey(org, epoch string) string {
	return projectsTallies + url.PathEscape(org) + "/" + epoch
}

// projectsDeletesMark is the key every delete of one of org's Projects
// writes, while the organization is limited: a count made meanwhile is
// made again.
// ProjectsCountsPrefix is the etcd key prefix, under storagePrefix, of
// org's counts of Projects and of its deletes mark: what to delete once
// the organization's Projects are gone.
func ProjectsCountsPrefix(storagePrefix, org string) string {
	return path.Join("/", storagePrefix, projectsTallies+url.PathEscape(org)) + "/"
}

func projectsDeletesMark(org string) string {
	return projectsTallies + url.PathEscape(org) + "/deletes"
}

// ProjectsCounter counts an organization's Projects in storage: how many,
// and the revision of storage counted.
type ProjectsCounter func(ctx context.Context, org string) (count, revision int64, err error)

// maxProjectCounts bounds how many times one count is made again because
// Projects of the organization were deleted while it was made; countTimeout
// how long it may take in all.
const (
	maxProjectCounts = 8
	countTimeout     = 30 * time.Second
)

// ProjectTallies keeps, on etcd, the count of each organization's Projects
// that a grant limits in storage, beside the Projects: every replica
// moves it in the transactions that create and delete them (the create's
// guard, Guard; the delete's, TalliesOf), so two replicas cannot both store
// the organization's last Project. Without it each replica counts from its
// own cache of Projects, which shows another replica's Project a watch's
// delivery later.
//
// The count is made, once per epoch (the grants that set the limit), by
// the first create that finds none, from the storage of Projects; a
// server's creates of one organization at once are committed together
// (tenantstorage's turns), so the count costs the organization's creates
// no rate. What it holds is an entry per organization this server created
// a limited Project in: what it last knew of the count.
type ProjectTallies struct {
	ledger *Ledger
	kv     clientv3.KV
	prefix string
	count  ProjectsCounter

	mu   sync.Mutex
	orgs map[string]*orgProjects
}

// orgProjects is what a server knows of one organization's count.
type orgProjects struct {
	epoch string
	// tally is the count as last known (Revision 0: not known).
	tally tenantstorage.Tally
	// count makes one count at a time (its n and err under the
	// tallies' mu).
	count oneCount
}

// CountProjectsInStorage makes every organization's Projects that a grant
// limits counted in storage, over kv (under storagePrefix), counted afresh
// by count. It returns what a Project's delete takes from the counts
// (tenantstorage.Joints.Tallied for Projects).
func (l *Ledger) CountProjectsInStorage(kv clientv3.KV, storagePrefix string, count ProjectsCounter) tenantstorage.TalliesOf {
	t := &ProjectTallies{ledger: l, kv: kv, prefix: storagePrefix, count: count, orgs: map[string]*orgProjects{}}
	l.mu.Lock()
	l.projects = t
	l.mu.Unlock()
	return t.held
}

// projectTallies is the ledger's ProjectTallies, or nil.
func (l *Ledger) projectTallies() *ProjectTallies {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.projects
}

// held is what a Project being deleted holds of its organization's count:
// one, where a grant limits the organization's Projects; the delete writes
// the organization's deletes mark then too.
func (t *ProjectTallies) held(obj runtime.Object) ([]tenantstorage.Tally, string) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, ""
	}
	org := m.GetLabels()[tenancy.OrganizationLabel]
	epoch, ok := t.epoch(org)
	if !ok {
		return nil, ""
	}
	return []tenantstorage.Tally{{Key: ProjectsTallyKey(org, epoch), Add: 1, Keep: true}}, projectsDeletesMark(org)
}

// epoch names the grants that limit org's Projects; false when none does.
func (t *ProjectTallies) epoch(org string) (string, bool) {
	if org == "" {
		return "", false
	}
	c := Consumer{Kind: KindOrganization, Name: org}
	t.ledger.mu.RLock()
	_, grants := t.ledger.limitLocked(BucketKey{c, ProjectsPerOrganization})
	t.ledger.mu.RUnlock()
	if len(grants) == 0 {
		return "", false
	}
	return t.ledger.grantsEpoch(c, ProjectsPerOrganization), true
}

// guard returns the guard of org's count for the create of one of its
// Projects, or nil when no grant limits them. refuse makes the create's
// answer when it does not fit.
func (t *ProjectTallies) guard(ctx context.Context, org string, refuse func(*Exceeded) error) tenantstorage.TallyGuard {
	epoch, ok := t.epoch(org)
	if !ok {
		return nil
	}
	return &projectsGuard{t: t, ctx: ctx, org: org, epoch: epoch, key: ProjectsTallyKey(org, epoch), refuse: refuse}
}

// projectsGuard keeps an organization's count of Projects for one create:
// it expects the count as the server last knew it, where the create fits
// there; otherwise, and when the count moved, it decides from what the
// count holds, counting first where there is none.
type projectsGuard struct {
	t               *ProjectTallies
	ctx             context.Context
	org, epoch, key string
	refuse          func(*Exceeded) error
	// counts is the organization's count of counts when the guard last
	// expected: a count made since makes counting again needless.
	counts int64
}

var _ tenantstorage.TallyGuard = &projectsGuard{}

func (g *projectsGuard) Keys() []string { return []string{g.key} }

// entryLocked is what the server knows of the guard's organization, in its
// epoch.
func (g *projectsGuard) entryLocked() *orgProjects {
	e := g.t.orgs[g.org]
	if e == nil {
		e = &orgProjects{epoch: g.epoch}
		g.t.orgs[g.org] = e
	}
	if e.epoch != g.epoch {
		e.epoch, e.tally = g.epoch, tenantstorage.Tally{}
	}
	return e
}

// known returns the count as the server knows it, and whether it does.
func (g *projectsGuard) known() (tenantstorage.Tally, bool) {
	g.t.mu.Lock()
	defer g.t.mu.Unlock()
	e := g.entryLocked()
	g.counts = e.count.n
	return e.tally, e.tally.Revision > 0
}

// learn keeps what the count holds, where it is newer than what was known
// (a count read absent is no longer known).
func (g *projectsGuard) learn(now tenantstorage.Tally) {
	g.t.mu.Lock()
	defer g.t.mu.Unlock()
	e := g.entryLocked()
	if now.Revision == 0 || now.Revision >= e.tally.Revision {
		e.tally = tenantstorage.Tally{Key: g.key, Revision: now.Revision, Value: now.Value, Keep: true}
	}
}

// exceeded returns the refusal of one more Project with used stored, or
// nil when it fits (or nothing limits it any more).
func (g *projectsGuard) exceeded(used int64) *Exceeded {
	l := g.t.ledger
	l.mu.RLock()
	defer l.mu.RUnlock()
	k := BucketKey{Consumer{Kind: KindOrganization, Name: g.org}, ProjectsPerOrganization}
	limit, grants := l.limitLocked(k)
	if len(grants) == 0 || used+1 <= limit {
		return nil
	}
	unit := ""
	if reg, ok := l.validTypeLocked(k.ResourceType, k.Consumer.Kind); ok {
		unit = reg.baseUnit()
	}
	return &Exceeded{Bucket: k, Limit: limit, Used: used, Amount: 1, Unit: unit}
}

// Expect expects the count as known, where one more Project fits after
// ahead; otherwise (not known, or full as known) a revision no key has, so
// that the transaction reads it for Moved to decide.
func (g *projectsGuard) Expect(ahead []int64) []tenantstorage.Tally {
	known, ok := g.known()
	more := int64(0)
	if len(ahead) > 0 {
		more = ahead[0]
	}
	out := tenantstorage.Tally{Key: g.key, Revision: known.Revision, Value: known.Value, Add: 1, Keep: true}
	if !ok || g.low(known) || g.exceeded(known.Value+more) != nil {
		out.Revision = -1
	}
	return []tenantstorage.Tally{out}
}

// low reports whether the count holds fewer Projects than the server's
// cache of Projects shows the organization has: some were stored without
// moving it (created through an update — a server-side apply, a PUT —,
// by a server that did not know the grant yet, or with the quota's
// admission off), and their deletes take from it. It is counted again. A
// Project purged a moment ago and still in the cache makes it count again
// needlessly, once.
func (g *projectsGuard) low(known tenantstorage.Tally) bool {
	l := g.t.ledger
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.allocatedLocked(BucketKey{Consumer{Kind: KindOrganization, Name: g.org}, ProjectsPerOrganization}) > known.Value
}

func (g *projectsGuard) Moved(now []tenantstorage.Tally) error {
	if len(now) > 0 {
		g.learn(now[0])
	}
	known, ok := g.known()
	if !ok || g.low(known) {
		if err := g.countProjects(known.Revision); err != nil {
			return err
		}
		if known, ok = g.known(); !ok {
			return apierrors.NewServiceUnavailable(fmt.Sprintf("counting the Projects of organization %s, for its quota: retry", g.org))
		}
	}
	if e := g.exceeded(known.Value); e != nil {
		return g.refuse(e)
	}
	return nil
}

func (g *projectsGuard) Stored(now []tenantstorage.Tally) {
	if len(now) > 0 {
		g.learn(now[0])
	}
}

// countProjects counts the organization's Projects in storage into its
// count (as was is: at that revision, 0 for none), unless another create
// of this server counted since the guard last expected. The count is
// written only where it did not move and no Project of the organization
// was deleted since the Projects were read; one made wrong meanwhile is
// made again.
func (g *projectsGuard) countProjects(was int64) error {
	g.t.mu.Lock()
	e := g.entryLocked()
	g.t.mu.Unlock()
	return e.count.run(&g.t.mu, g.counts, func() error {
		// The count is every waiting create's: the request that makes
		// it ending does not end it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(g.ctx), countTimeout)
		defer cancel()
		for range maxProjectCounts {
			n, revision, err := g.t.count(ctx, g.org)
			if err != nil {
				return apierrors.NewServiceUnavailable(fmt.Sprintf("counting the Projects of organization %s, for its quota: %v", g.org, err))
			}
			now, ok, err := tenantstorage.SetCount(ctx, g.t.kv, g.t.prefix, g.key, projectsDeletesMark(g.org), n, revision, was)
			if err != nil {
				return apierrors.NewServiceUnavailable(fmt.Sprintf("writing the count of organization %s's Projects, for its quota: %v", g.org, err))
			}
			if ok || (was != 0 && now.Revision != 0) {
				// Written; or, counting again a count that moved
				// meanwhile (a create or a delete stored, which keep
				// it), the next create decides from it as it is now.
				g.learn(now)
				return nil
			}
		}
		return apierrors.NewServiceUnavailable(fmt.Sprintf("counting the Projects of organization %s, for its quota: Projects were deleted meanwhile at each of %d tries: retry", g.org, maxProjectCounts))
	}, nil)
}

// ForgetOrganization drops what the server knows of org's count of
// Projects in storage (the organization was deleted).
func (l *Ledger) ForgetOrganization(org string) {
	t := l.projectTallies()
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.orgs, org)
}
