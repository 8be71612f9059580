// Package quota is Milo's provider quota system: an in-memory ledger of
// registrations, grants and claims that admission decides from, the
// admission plugin that claims quota for the objects ClaimCreationPolicies
// match, and the arithmetic of AllowanceBuckets.
//
// The ledger is fed by one informer per quota kind over the platform's
// objects, so what it costs grows with grants and claims, never with
// projects: a consumer without a grant for a resource type has no bucket,
// no claims and no entry here.
package quota

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Consumer kinds Milo charges.
const (
	KindOrganization = "Organization"
	KindProject      = "Project"
	// ConsumerGroup is the API group of both consumer kinds.
	ConsumerGroup = "resourcemanager.miloapis.com"
)

// Consumer is who is charged: an Organization or a Project.
type Consumer struct {
	Kind, Name string
}

func (c Consumer) String() string { return c.Kind + " " + c.Name }

// Ref returns c as a ConsumerRef.
func (c Consumer) Ref() quotav1alpha1.ConsumerRef {
	return quotav1alpha1.ConsumerRef{APIGroup: ConsumerGroup, Kind: c.Kind, Name: c.Name}
}

// BucketKey identifies one AllowanceBucket: a consumer and a resource type.
type BucketKey struct {
	Consumer     Consumer
	ResourceType string
}

// pendingTTL bounds how long a claim admission created counts before the
// ledger sees it stored: longer than any informer lag, short enough that a
// claim deleted before it was ever seen stops counting.
const pendingTTL = 2 * time.Minute

type registration struct {
	name, resourceType, kind, unit string
	consumer                       quotav1alpha1.ConsumerType
	claiming                       map[schema.GroupKind]bool
	created                        time.Time
}

type grant struct {
	namespace, name string
	uid             string
	generation      int64
	consumer        Consumer
	allowances      map[string]int64 // by resource type
}

type claim struct {
	consumer Consumer
	requests map[string]int64
	trigger  string // TriggerKey of its object, "" when unknown
	project  string
	// tallied: counted in its buckets' tallies (TalliedAnnotation).
	tallied bool
}

// pendingClaim is what one reserved claim (or metered object) holds of
// each bucket until it is seen stored.
type pendingClaim struct {
	amounts map[BucketKey]int64
	expires time.Time
	// withObject: the claim is stored in its object's own transaction, so
	// when it is seen its object was stored too and need not be looked up,
	// unless a delete of the object (or its project's) came first (going).
	withObject, going bool
	trigger, project  string
	// committed: stored with its tallies; the tallies count it from then on.
	committed bool
	// inFlight: when its create's transaction began (zero: not in one).
	inFlight time.Time
}

// Ledger is the quota system's state. Its methods are safe for concurrent use.
type Ledger struct {
	mu            sync.RWMutex
	registrations map[string]*registration // by name
	byType        map[string]*registration // the oldest registration of each resource type
	grants        map[string]*grant        // by namespace/name
	grantsOf      map[Consumer]map[string]*grant
	claims        map[string]*claim // by namespace/name
	allocated     map[BucketKey]int64
	claimCount    map[BucketKey]int32
	pending       map[string]pendingClaim
	pendingOf     map[BucketKey]int64
	// pendingCommittedOf is, of pendingOf, what claims stored with their
	// tallies hold; talliedAllocated, of allocated, what tallied claims
	// seen hold; tallies what the ledger last knew of each bucket's tally.
	pendingCommittedOf map[BucketKey]int64
	talliedAllocated   map[BucketKey]int64
	tallies            map[BucketKey]tallyState
	byTrigger          map[string][]string            // TriggerKey -> claim keys
	byProject          map[string]map[string]struct{} // project of the claimed object -> claim keys
	claimPolicies      map[string]*ClaimPolicy
	policiesByGK       atomic.Pointer[map[schema.GroupKind][]*ClaimPolicy]
	// metered resource types are counted from what the server already
	// caches (MeterAdd), not from claims; metered[t] holds the counts.
	metered map[string]map[Consumer]int64

	// projects counts organizations' Projects in storage, where set
	// (CountProjectsInStorage).
	projects *ProjectTallies

	// pendingWithObject counts the pending claims stored with their object.
	pendingWithObject atomic.Int64

	synced  atomic.Bool
	now     func() time.Time
	changed func(BucketKey)
	verify  func(claimKey string)
	going   func(claimKey string)
	seen    func(claimKey string)
	recount func(namespace string, k BucketKey)
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	l := &Ledger{
		registrations: map[string]*registration{}, byType: map[string]*registration{},
		grants: map[string]*grant{}, grantsOf: map[Consumer]map[string]*grant{},
		claims: map[string]*claim{}, allocated: map[BucketKey]int64{}, claimCount: map[BucketKey]int32{},
		pending: map[string]pendingClaim{}, pendingOf: map[BucketKey]int64{},
		pendingCommittedOf: map[BucketKey]int64{}, talliedAllocated: map[BucketKey]int64{}, tallies: map[BucketKey]tallyState{},
		byTrigger: map[string][]string{}, byProject: map[string]map[string]struct{}{},
		claimPolicies: map[string]*ClaimPolicy{}, metered: map[string]map[Consumer]int64{}, now: time.Now,
	}
	empty := map[schema.GroupKind][]*ClaimPolicy{}
	l.policiesByGK.Store(&empty)
	return l
}

// Notify sets what the ledger calls when a bucket's numbers may have
// changed, when a claim's object should be checked (it may be gone), and
// when it is being deleted (a delete of it was admitted: it should be gone
// soon). They are called with the ledger's lock held, read or write, from
// any goroutine: they must only queue.
func (l *Ledger) Notify(changed func(BucketKey), verify, going func(claimKey string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changed, l.verify, l.going = changed, verify, going
}

// NotifySeen sets what the ledger calls, in place of verify, for a new
// claim stored in its object's own transaction: its object is known to
// have been stored. Called as Notify's functions are.
func (l *Ledger) NotifySeen(seen func(claimKey string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = seen
}

// StoredWithObject records that the reserved claims of plans are stored in
// their object's own transaction (see pendingClaim.withObject).
func (l *Ledger) StoredWithObject(plans []ClaimPlan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range plans {
		key := Key(p.Namespace, p.Name)
		if pc, ok := l.pending[key]; ok && !pc.withObject {
			pc.withObject, pc.trigger, pc.project = true, p.Trigger.Key(), p.Trigger.Project
			l.pending[key] = pc
			l.pendingWithObject.Add(1)
		}
	}
}

// MarkSynced records that every informer feeding the ledger has synced.
func (l *Ledger) MarkSynced() { l.synced.Store(true) }

// Synced reports whether the ledger holds the stored state.
func (l *Ledger) Synced() bool { return l.synced.Load() }

func (l *Ledger) notify(k BucketKey) {
	if l.changed != nil {
		l.changed(k)
	}
}

// SetRegistration records r.
func (l *Ledger) SetRegistration(r *quotav1alpha1.ResourceRegistration) {
	reg := &registration{name: r.Name, resourceType: r.Spec.ResourceType, kind: r.Spec.Type, consumer: r.Spec.ConsumerType,
		claiming: map[schema.GroupKind]bool{}, created: r.CreationTimestamp.Time, unit: r.Spec.BaseUnit}
	for _, c := range r.Spec.ClaimingResources {
		reg.claiming[schema.GroupKind{Group: c.APIGroup, Kind: c.Kind}] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.registrations[r.Name] = reg
	l.indexTypesLocked()
}

// DeleteRegistration forgets the registration name.
func (l *Ledger) DeleteRegistration(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.registrations, name)
	l.indexTypesLocked()
}

func (l *Ledger) indexTypesLocked() {
	byType := map[string]*registration{}
	for _, r := range l.registrations {
		if old, ok := byType[r.resourceType]; !ok || r.created.Before(old.created) || (r.created.Equal(old.created) && r.name < old.name) {
			byType[r.resourceType] = r
		}
	}
	l.byType = byType
	for c, gs := range l.grantsOf {
		for _, g := range gs {
			for t := range g.allowances {
				l.notify(BucketKey{c, t})
			}
		}
	}
}

// RegistrationError says why the registration name is not in effect, or nil.
func (l *Ledger) RegistrationError(name string) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r, ok := l.registrations[name]
	if !ok {
		return ErrNotLoaded
	}
	if winner := l.byType[r.resourceType]; winner != r {
		return fmt.Errorf("resource type %q is registered by %s", r.resourceType, winner.name)
	}
	if r.consumer.APIGroup != ConsumerGroup || (r.consumer.Kind != KindOrganization && r.consumer.Kind != KindProject) {
		return fmt.Errorf("spec.consumerType: Milo charges Organizations and Projects (%s), not %s/%s", ConsumerGroup, r.consumer.APIGroup, r.consumer.Kind)
	}
	return nil
}

// ConsumerKind returns the kind of consumer resource type t charges, or "".
func (l *Ledger) ConsumerKind(t string) string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if r, ok := l.byType[t]; ok {
		return r.consumer.Kind
	}
	return ""
}

// validTypeLocked returns the registration of resource type t when it is in
// effect for consumers of kind.
func (l *Ledger) validTypeLocked(t, kind string) (*registration, bool) {
	r, ok := l.byType[t]
	if !ok || r.consumer.APIGroup != ConsumerGroup || r.consumer.Kind != kind {
		return nil, false
	}
	return r, true
}

// ErrNotLoaded: the ledger has not seen the object (yet).
var ErrNotLoaded = errors.New("not in the quota ledger")

// Key is the ledger's key of a namespaced object.
func Key(namespace, name string) string { return namespace + "/" + name }

// SetGrant records g.
func (l *Ledger) SetGrant(g *quotav1alpha1.ResourceGrant) {
	ng := &grant{namespace: g.Namespace, name: g.Name, uid: string(g.UID), generation: g.Generation,
		consumer: Consumer{Kind: g.Spec.ConsumerRef.Kind, Name: g.Spec.ConsumerRef.Name}, allowances: map[string]int64{}}
	for _, a := range g.Spec.Allowances {
		for _, b := range a.Buckets {
			ng.allowances[a.ResourceType] += b.Amount
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.removeGrantLocked(Key(g.Namespace, g.Name))
	if g.DeletionTimestamp != nil {
		return
	}
	l.grants[Key(g.Namespace, g.Name)] = ng
	if l.grantsOf[ng.consumer] == nil {
		l.grantsOf[ng.consumer] = map[string]*grant{}
	}
	l.grantsOf[ng.consumer][Key(g.Namespace, g.Name)] = ng
	for t := range ng.allowances {
		l.notify(BucketKey{ng.consumer, t})
	}
}

// DeleteGrant forgets a grant.
func (l *Ledger) DeleteGrant(namespace, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.removeGrantLocked(Key(namespace, name))
}

func (l *Ledger) removeGrantLocked(key string) {
	old, ok := l.grants[key]
	if !ok {
		return
	}
	delete(l.grants, key)
	delete(l.grantsOf[old.consumer], key)
	if len(l.grantsOf[old.consumer]) == 0 {
		delete(l.grantsOf, old.consumer)
	}
	for t := range old.allowances {
		l.notify(BucketKey{old.consumer, t})
	}
}

// GrantError says why the grant namespace/name does not count, or nil.
func (l *Ledger) GrantError(namespace, name string) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	g, ok := l.grants[Key(namespace, name)]
	if !ok {
		return ErrNotLoaded
	}
	if err := grantPlacement(g.namespace, g.consumer); err != nil {
		return err
	}
	for _, t := range slices.Sorted(maps.Keys(g.allowances)) {
		if _, ok := l.validTypeLocked(t, g.consumer.Kind); !ok {
			return fmt.Errorf("no active ResourceRegistration of resource type %q charges a %s", t, g.consumer.Kind)
		}
	}
	return nil
}

// grantPlacement checks what the ledger can without the hierarchy: an
// Organization's grants live in its own namespace (admission checks that a
// Project's live in its organization's).
func grantPlacement(namespace string, c Consumer) error {
	org, ok := tenancy.OrganizationOfNamespace(namespace)
	switch {
	case !ok:
		return fmt.Errorf("grants live in the namespace organization-{org} of their consumer's organization, not %s", namespace)
	case c.Kind == KindOrganization && c.Name != org:
		return fmt.Errorf("a grant to Organization %s lives in %s, not %s", c.Name, tenancy.OrganizationNamespace(c.Name), namespace)
	case c.Kind != KindOrganization && c.Kind != KindProject:
		return fmt.Errorf("spec.consumerRef.kind: Milo charges Organizations and Projects, not %q", c.Kind)
	}
	return nil
}

// HasGrant reports whether c has a grant, in effect or not, for any of types.
func (l *Ledger) HasGrant(c Consumer, types []string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, g := range l.grantsOf[c] {
		for _, t := range types {
			if _, ok := g.allowances[t]; ok {
				return true
			}
		}
	}
	return false
}

// limitLocked returns k's limit and the grants that make it up.
func (l *Ledger) limitLocked(k BucketKey) (limit int64, grants []*grant) {
	if _, ok := l.validTypeLocked(k.ResourceType, k.Consumer.Kind); !ok {
		return 0, nil
	}
	for _, g := range l.grantsOf[k.Consumer] {
		amount, ok := g.allowances[k.ResourceType]
		if !ok || grantPlacement(g.namespace, g.consumer) != nil {
			continue
		}
		limit += amount
		grants = append(grants, g)
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].name < grants[j].name })
	return limit, grants
}

// SetClaim records c. check asks for its object to be looked up: when the
// claim is new, and at each resync (not on its own status writes).
func (l *Ledger) SetClaim(c *quotav1alpha1.ResourceClaim, check bool) {
	key := Key(c.Namespace, c.Name)
	nc := &claim{consumer: Consumer{Kind: c.Spec.ConsumerRef.Kind, Name: c.Spec.ConsumerRef.Name}, requests: map[string]int64{},
		trigger: c.Annotations[TriggerAnnotation], project: c.Annotations[TriggerProjectAnnotation], tallied: c.Annotations[TalliedAnnotation] == "true"}
	for _, r := range c.Spec.Requests {
		nc.requests[r.ResourceType] += r.Amount
	}
	if denied(c) {
		nc.requests = nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.claims[key]; ok {
		l.uncountLocked(key, old)
	}
	pc, wasPending := l.pending[key]
	l.dropPendingLocked(key)
	l.claims[key] = nc
	for t, amount := range nc.requests {
		k := BucketKey{nc.consumer, t}
		l.allocated[k] += amount
		if nc.tallied {
			l.talliedAllocated[k] += amount
		}
		l.claimCount[k]++
		l.notify(k)
	}
	if nc.trigger != "" {
		l.byTrigger[nc.trigger] = append(l.byTrigger[nc.trigger], key)
	}
	if nc.project != "" {
		if l.byProject[nc.project] == nil {
			l.byProject[nc.project] = map[string]struct{}{}
		}
		l.byProject[nc.project][key] = struct{}{}
	}
	switch {
	case !check:
	case wasPending && pc.withObject && l.seen != nil:
		l.seen(key)
		if pc.going && l.going != nil {
			// A delete came first: checked as for a delete of a claim seen.
			l.going(key)
		}
	case l.verify != nil:
		l.verify(key)
	}
}

// denied reports whether the claim was refused: it holds nothing.
func denied(c *quotav1alpha1.ResourceClaim) bool {
	cond := meta.FindStatusCondition(c.Status.Conditions, quotav1alpha1.ConditionGranted)
	return cond != nil && cond.Status == "False" && cond.Reason != "" && cond.Reason != "PendingEvaluation"
}

// DeleteClaim forgets a claim: its units are free.
func (l *Ledger) DeleteClaim(namespace, name string) {
	key := Key(namespace, name)
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.claims[key]; ok {
		l.uncountLocked(key, old)
		delete(l.claims, key)
	}
	l.dropPendingLocked(key)
}

func (l *Ledger) uncountLocked(key string, c *claim) {
	for t, amount := range c.requests {
		k := BucketKey{c.consumer, t}
		l.allocated[k] -= amount
		if c.tallied {
			if l.talliedAllocated[k] -= amount; l.talliedAllocated[k] <= 0 {
				delete(l.talliedAllocated, k)
			}
		}
		l.claimCount[k]--
		if l.claimCount[k] <= 0 {
			delete(l.allocated, k)
			delete(l.claimCount, k)
		}
		l.notify(k)
	}
	if c.trigger != "" {
		keys := l.byTrigger[c.trigger]
		for i, k := range keys {
			if k == key {
				keys = append(keys[:i], keys[i+1:]...)
				break
			}
		}
		if len(keys) == 0 {
			delete(l.byTrigger, c.trigger)
		} else {
			l.byTrigger[c.trigger] = keys
		}
	}
	if c.project != "" {
		delete(l.byProject[c.project], key)
		if len(l.byProject[c.project]) == 0 {
			delete(l.byProject, c.project)
		}
	}
}

func (l *Ledger) dropPendingLocked(key string) {
	p, ok := l.pending[key]
	if !ok {
		return
	}
	delete(l.pending, key)
	if p.withObject {
		l.pendingWithObject.Add(-1)
	}
	for k, amount := range p.amounts {
		l.pendingOf[k] -= amount
		if l.pendingOf[k] <= 0 {
			delete(l.pendingOf, k)
		}
		if p.committed {
			if l.pendingCommittedOf[k] -= amount; l.pendingCommittedOf[k] <= 0 {
				delete(l.pendingCommittedOf, k)
			}
		}
		l.notify(k)
	}
}

// Exceeded is a claim the consumer's allowance cannot hold.
type Exceeded struct {
	Bucket              BucketKey
	Limit, Used, Amount int64
	Unit                string
}

func (e *Exceeded) Error() string {
	return fmt.Sprintf("quota exceeded for resource type %q of %s: limit %d %s, %d in use, %d requested",
		e.Bucket.ResourceType, e.Bucket.Consumer, e.Limit, e.Unit, e.Used, e.Amount)
}

// Reserve charges every plan's requests to their buckets, all or none: it
// returns an *Exceeded when one does not fit. Requests of a resource type a
// consumer has no grant for are not limited and not charged; plans left
// with no request are dropped from the result. The units a reserved plan
// holds count until the ledger sees its claim stored, Release is called, or
// pendingTTL passes.
func (l *Ledger) Reserve(plans []ClaimPlan) ([]ClaimPlan, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expirePendingLocked()
	var out []ClaimPlan
	want := map[BucketKey]int64{}
	meteredOf := map[string][]meteredRequest{}
	for _, p := range plans {
		kept := p
		kept.Requests = nil
		for _, r := range p.Requests {
			k := BucketKey{p.Consumer, r.ResourceType}
			reg, ok := l.validTypeLocked(r.ResourceType, p.Consumer.Kind)
			if !ok || storageMetered[r.ResourceType] || reg.kind == quotav1alpha1.TypeFeature || !reg.claiming[p.Trigger.GroupKind()] {
				continue
			}
			limit, grants := l.limitLocked(k)
			if len(grants) == 0 {
				continue
			}
			used := l.allocatedLocked(k) + l.pendingOf[k] + want[k]
			if used+r.Amount > limit {
				return nil, &Exceeded{Bucket: k, Limit: limit, Used: used, Amount: r.Amount, Unit: reg.baseUnit()}
			}
			want[k] += r.Amount
			if _, ok := l.metered[r.ResourceType]; ok {
				meteredOf[p.Trigger.ObjectKey()] = append(meteredOf[p.Trigger.ObjectKey()], meteredRequest{p.Consumer, r})
				continue // counted when the object is seen: no claim
			}
			kept.Requests = append(kept.Requests, r)
		}
		if len(kept.Requests) > 0 {
			out = append(out, kept)
		}
	}
	expires := l.now().Add(pendingTTL)
	hold := func(key string, pc pendingClaim) {
		l.dropPendingLocked(key)
		for k, amount := range pc.amounts {
			l.pendingOf[k] += amount
		}
		l.pending[key] = pc
	}
	for object, rs := range meteredOf {
		pc := pendingClaim{amounts: map[BucketKey]int64{}, expires: expires}
		for _, r := range rs {
			pc.amounts[BucketKey{r.consumer, r.request.ResourceType}] += r.request.Amount
		}
		hold(meteredKey(object), pc)
	}
	for _, p := range out {
		key := Key(p.Namespace, p.Name)
		if _, stored := l.claims[key]; stored {
			continue // the object's claim exists already (a retried create of the same object)
		}
		pc := pendingClaim{amounts: map[BucketKey]int64{}, expires: expires}
		for _, r := range p.Requests {
			pc.amounts[BucketKey{p.Consumer, r.ResourceType}] += r.Amount
		}
		hold(key, pc)
	}
	return out, nil
}

type meteredRequest struct {
	consumer Consumer
	request  quotav1alpha1.ResourceRequest
}

func meteredKey(object string) string { return "metered|" + object }

// allocatedLocked is what k's consumer holds: its claims, or its count of
// a metered resource type.
func (l *Ledger) allocatedLocked(k BucketKey) int64 {
	if counts, ok := l.metered[k.ResourceType]; ok {
		return counts[k.Consumer]
	}
	return l.allocated[k]
}

// Meter makes resourceType metered: what a consumer holds of it is the
// count MeterAdd keeps, fed from a cache the server holds anyway, and
// admission stores no claim for it — a charged create costs no write.
func (l *Ledger) Meter(resourceType string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.metered[resourceType] == nil {
		l.metered[resourceType] = map[Consumer]int64{}
	}
}

// Metered reports whether resourceType is counted without claims.
func (l *Ledger) Metered(resourceType string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	_, ok := l.metered[resourceType]
	return ok
}

// MeterAdd counts delta objects of a metered resource type to c; object,
// when one is added, is its TriggerRef.ObjectKey: the units reserved for
// its create count from now on as the object's.
func (l *Ledger) MeterAdd(resourceType string, c Consumer, delta int64, object string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	counts, ok := l.metered[resourceType]
	if !ok {
		return
	}
	counts[c] += delta
	if counts[c] <= 0 {
		delete(counts, c)
	}
	if object != "" {
		l.dropPendingLocked(meteredKey(object))
	}
	l.notify(BucketKey{c, resourceType})
}

// ReleaseObject frees the metered units reserved for an object (its
// TriggerRef.ObjectKey) that was not created.
func (l *Ledger) ReleaseObject(object string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropPendingLocked(meteredKey(object))
}

func (r *registration) baseUnit() string { return r.unit }

func (l *Ledger) expirePendingLocked() {
	now := l.now()
	for key, p := range l.pending {
		if now.After(p.expires) {
			l.dropPendingLocked(key)
		}
	}
}

// Release frees the units of a reserved claim that was not stored.
func (l *Ledger) Release(namespace, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, stored := l.claims[Key(namespace, name)]; !stored {
		l.dropPendingLocked(Key(namespace, name))
	}
}

// BucketStatus is a bucket's numbers.
type BucketStatus struct {
	Limit, Allocated, Available int64
	ClaimCount, GrantCount      int32
	Grants                      []quotav1alpha1.ContributingGrantRef
	// Exists: the consumer has a grant for the type, so the bucket exists.
	Exists bool
}

// Bucket returns k's numbers; pending claims count as allocated.
func (l *Ledger) Bucket(k BucketKey) BucketStatus {
	l.mu.RLock()
	defer l.mu.RUnlock()
	limit, grants := l.limitLocked(k)
	s := BucketStatus{Limit: limit, Allocated: l.allocatedLocked(k) + l.pendingOf[k], ClaimCount: l.claimCount[k], GrantCount: int32(len(grants)), Exists: len(grants) > 0}
	if counts, ok := l.metered[k.ResourceType]; ok {
		s.ClaimCount = int32(counts[k.Consumer])
		if k.ResourceType == BytesPerProject {
			s.ClaimCount = int32(l.metered[ObjectsPerProject][k.Consumer])
		}
	}
	s.Available = max(0, s.Limit-s.Allocated)
	for _, g := range grants {
		s.Grants = append(s.Grants, quotav1alpha1.ContributingGrantRef{Name: g.name, LastObservedGeneration: g.generation, Amount: g.allowances[k.ResourceType]})
	}
	return s
}

// Buckets returns every bucket that exists or is charged.
func (l *Ledger) Buckets() []BucketKey {
	l.mu.RLock()
	defer l.mu.RUnlock()
	seen := map[BucketKey]bool{}
	for c, gs := range l.grantsOf {
		for _, g := range gs {
			for t := range g.allowances {
				seen[BucketKey{c, t}] = true
			}
		}
	}
	for k := range l.allocated {
		seen[k] = true
	}
	out := make([]BucketKey, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	return out
}

// TriggerDeleted asks for the claims of the object trigger to be checked:
// a delete of it was admitted.
func (l *Ledger) TriggerDeleted(trigger string) {
	l.pendingGoing(func(pc pendingClaim) bool { return pc.trigger == trigger })
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.going == nil {
		return
	}
	for _, key := range l.byTrigger[trigger] {
		l.going(key)
	}
}

// pendingGoing marks the pending claims stored with their object that
// match as going: when seen, they are checked as the claims of an object
// being deleted (the delete may have come before the ledger saw them).
// Deletes take the ledger's write lock only while such claims are pending.
func (l *Ledger) pendingGoing(match func(pendingClaim) bool) {
	if l.pendingWithObject.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, pc := range l.pending {
		if pc.withObject && !pc.going && match(pc) {
			pc.going = true
			l.pending[key] = pc
		}
	}
}

// ProjectDeleted asks for the claims of every object of project to be checked.
func (l *Ledger) ProjectDeleted(project string) {
	l.pendingGoing(func(pc pendingClaim) bool { return pc.project == project })
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.going == nil {
		return
	}
	for key := range l.byProject[project] {
		l.going(key)
	}
}

// SetClaimPolicy records p, compiled.
func (l *Ledger) SetClaimPolicy(p *ClaimPolicy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claimPolicies[p.Name] = p
	l.indexPoliciesLocked()
}

// DeleteClaimPolicy forgets the policy name.
func (l *Ledger) DeleteClaimPolicy(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.claimPolicies, name)
	l.indexPoliciesLocked()
}

func (l *Ledger) indexPoliciesLocked() {
	idx := map[schema.GroupKind][]*ClaimPolicy{}
	for _, p := range l.claimPolicies {
		if p.Active() {
			idx[p.Trigger] = append(idx[p.Trigger], p)
		}
	}
	for _, ps := range idx {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	}
	l.policiesByGK.Store(&idx)
}

// PoliciesFor returns the active claim policies of kind gk. Lock-free: it
// is asked on every create.
func (l *Ledger) PoliciesFor(gk schema.GroupKind) []*ClaimPolicy {
	return (*l.policiesByGK.Load())[gk]
}
