package quota

import (
	"context"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
)

// TalliedAnnotation marks a claim counted in its buckets' tallies: counts
// kept in storage beside the claims (on etcd), which a claim stored with
// its object adds to and its delete takes from, in the same transactions.
// Every replica of the server reads them when it charges, so two replicas
// cannot both take a bucket's last unit.
const TalliedAnnotation = "quota.miloapis.com/tallied"

// TallyKey is where bucket k's tally is kept, under the storage prefix.
func TallyKey(k BucketKey) string {
	return "_milo/quota-tallies/" + url.PathEscape(k.Consumer.Kind) + "/" + url.PathEscape(k.Consumer.Name) + "/" + url.PathEscape(k.ResourceType)
}

// ClaimTallies returns what a stored claim holds of its buckets' tallies:
// nothing unless it is tallied. The claims' storage takes it from them
// when the claim is deleted.
func ClaimTallies(obj runtime.Object) []tenantstorage.Tally {
	m, err := meta.Accessor(obj)
	if err != nil || m.GetAnnotations()[TalliedAnnotation] != "true" {
		return nil
	}
	c, ok := As[quotav1alpha1.ResourceClaim](obj)
	if !ok {
		return nil
	}
	consumer := Consumer{Kind: c.Spec.ConsumerRef.Kind, Name: c.Spec.ConsumerRef.Name}
	held := map[string]int64{}
	for _, r := range c.Spec.Requests {
		held[r.ResourceType] += r.Amount
	}
	var out []tenantstorage.Tally
	for _, t := range slices.Sorted(maps.Keys(held)) {
		out = append(out, tenantstorage.Tally{Key: TallyKey(BucketKey{consumer, t}), Add: held[t]})
	}
	return out
}

// tallyState is what the ledger last knew of one bucket's tally.
type tallyState struct {
	revision, value int64
}

// tallyGuard keeps the tallies of one create's reserved claims (see
// tenantstorage.TallyGuard): it expects each as the ledger last knew it,
// and when one moved decides again from what it holds, with the ledger's
// other numbers, as Reserve did.
type tallyGuard struct {
	l *Ledger
	// claims are the ledger's keys of the reserved claims; buckets and
	// adds what they charge, in one order.
	claims  []string
	buckets []BucketKey
	adds    []int64
	// namespaces are where each bucket's claims are (its consumer's organization's).
	namespaces []string
	// refuse is the create's answer when its claims no longer fit.
	refuse func(*Exceeded) error
}

var _ tenantstorage.TallyGuard = &tallyGuard{}

// Guard returns the guard of the tallies the reserved plans' claims add to
// when they are stored with their object (their claims carry
// TalliedAnnotation); refuse makes the create's answer when they no longer
// fit.
func (l *Ledger) Guard(plans []ClaimPlan, refuse func(*Exceeded) error) tenantstorage.TallyGuard {
	amounts := map[BucketKey]int64{}
	namespaces := map[BucketKey]string{}
	g := &tallyGuard{l: l, refuse: refuse}
	for _, p := range plans {
		g.claims = append(g.claims, Key(p.Namespace, p.Name))
		for _, r := range p.Requests {
			amounts[BucketKey{p.Consumer, r.ResourceType}] += r.Amount
			namespaces[BucketKey{p.Consumer, r.ResourceType}] = p.Namespace
		}
	}
	g.buckets = slices.SortedFunc(maps.Keys(amounts), func(a, b BucketKey) int { return strings.Compare(TallyKey(a), TallyKey(b)) })
	for _, k := range g.buckets {
		g.adds = append(g.adds, amounts[k])
		g.namespaces = append(g.namespaces, namespaces[k])
	}
	return g
}

func (g *tallyGuard) Keys() []string {
	keys := make([]string, len(g.buckets))
	for i, k := range g.buckets {
		keys[i] = TallyKey(k)
	}
	return keys
}

// Expect expects each tally as the ledger last knew it (absent where it
// knows none), when the create fits under that: then a transaction that
// finds it so stores a create that fits. Where it would not fit, what the
// ledger knew may be old (claims deleted since): it expects a revision no
// tally has, so that the transaction reads what the tally holds and Moved
// decides from that. ahead is not needed: what the ledger checks a create against counts
// every reservation of this server not stored yet, those of the creates
// committed before it in its transaction among them.
func (g *tallyGuard) Expect(ahead []int64) []tenantstorage.Tally {
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]tenantstorage.Tally, len(g.buckets))
	canStore := true
	for i, k := range g.buckets {
		ts := l.tallies[k]
		out[i] = tenantstorage.Tally{Key: TallyKey(k), Revision: ts.revision, Value: ts.value, Add: g.adds[i]}
		if limit, grants := l.limitLocked(k); len(grants) > 0 && l.withTallyLocked(k, ts.value) > limit {
			out[i].Revision = -1
			canStore = false
		}
	}
	// A transaction that may store the create is under way (see Moved);
	// one that only reads is not.
	if canStore {
		g.markInFlightLocked(l.now())
	} else {
		g.markInFlightLocked(time.Time{})
	}
	return out
}

// Moved decides again from what the tallies hold: the create is refused,
// and its units freed, where it does not fit.
func (g *tallyGuard) Moved(now []tenantstorage.Tally) error {
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range g.buckets {
		if i < len(now) {
			// Read after anything the ledger knew: it is what the tally holds.
			l.learnTallyLocked(k, now[i].Revision, now[i].Value, true)
		}
	}
	g.markInFlightLocked(time.Time{})
	for i, k := range g.buckets {
		limit, grants := l.limitLocked(k)
		if len(grants) == 0 || i >= len(now) {
			continue // the grant went meanwhile: nothing limits the bucket
		}
		used := l.withTallyLocked(k, now[i].Value) // this create's units among them, still reserved
		// Another create of this replica may be stored and not yet told
		// so: counted in the tally read and as reserved. A refusal that
		// such creates could undo waits until they know their outcome (a
		// transaction's time; inFlightWindow at most), and decides on the
		// tally as then known.
		for wait := l.now().Add(inFlightWindow); used > limit && used-l.inFlightLocked(k) <= limit && l.now().Before(wait); {
			l.mu.Unlock()
			time.Sleep(200 * time.Microsecond)
			l.mu.Lock()
			tally := now[i].Value
			if ts, ok := l.tallies[k]; ok && ts.revision > now[i].Revision {
				tally = ts.value // told since, by a create stored after the read
			}
			used = l.withTallyLocked(k, tally)
		}
		if used > limit {
			for _, key := range g.claims {
				l.dropPendingLocked(key)
			}
			if l.aboveSeenLocked(k, now[i].Value) && l.recount != nil {
				// The tally holds more than the tallied claims this server
				// has seen: claims it has not seen yet, or a tally left
				// wrong. Counted again, in a while, to tell.
				l.recount(g.namespaces[i], k)
			}
			unit := ""
			if reg, ok := l.validTypeLocked(k.ResourceType, k.Consumer.Kind); ok {
				unit = reg.baseUnit()
			}
			return g.refuse(&Exceeded{Bucket: k, Limit: limit, Used: used - g.adds[i], Amount: g.adds[i], Unit: unit})
		}
	}
	return nil
}

func (g *tallyGuard) Stored(now []tenantstorage.Tally) {
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, key := range g.claims {
		if pc, ok := l.pending[key]; ok && !pc.committed {
			pc.committed, pc.inFlight = true, time.Time{}
			l.pending[key] = pc
			for k, amount := range pc.amounts {
				l.pendingCommittedOf[k] += amount
			}
		}
	}
	for i, k := range g.buckets {
		if i < len(now) {
			l.learnTallyLocked(k, now[i].Revision, now[i].Value, false)
		}
	}
}

// markInFlightLocked marks the guard's reservations as in a transaction
// that may store them since at (the zero time: no longer).
func (g *tallyGuard) markInFlightLocked(at time.Time) {
	for _, key := range g.claims {
		if pc, ok := g.l.pending[key]; ok {
			pc.inFlight = at
			g.l.pending[key] = pc
		}
	}
}

// inFlightWindow is how long a reservation counts as in a transaction:
// longer than a transaction takes, short enough that one whose outcome was
// never known (a connection lost mid-commit) stops counting soon.
const inFlightWindow = 2 * time.Second

// inFlightLocked is what k's reservations in a transaction hold (other
// guards', each marked at most inFlightWindow ago): stored perhaps, and
// not yet told so.
func (l *Ledger) inFlightLocked(k BucketKey) int64 {
	var n int64
	since := l.now().Add(-inFlightWindow)
	for _, pc := range l.pending {
		if !pc.committed && pc.inFlight.After(since) {
			n += pc.amounts[k]
		}
	}
	return n
}

// learnTallyLocked records what k's tally held at revision, unless the
// ledger knows of a later write and what it learnt is not a read (a tally
// read absent has no revision). A tally that came to nothing is forgotten.
func (l *Ledger) learnTallyLocked(k BucketKey, revision, value int64, read bool) {
	if ts, ok := l.tallies[k]; ok && !read && ts.revision > revision {
		return
	}
	if revision == 0 || value <= 0 {
		delete(l.tallies, k)
		return
	}
	l.tallies[k] = tallyState{revision: revision, value: value}
}

// withTallyLocked is what k's consumer holds if its tally holds tallied:
// that, the claims not tallied the ledger has seen, and the reservations
// not stored yet (a create's own among them). Admission reserves from what
// the ledger has seen (Reserve); a create is stored only where this fits,
// with the tally at that value.
func (l *Ledger) withTallyLocked(k BucketKey, tallied int64) int64 {
	return tallied + l.allocated[k] - l.talliedAllocated[k] + l.pendingOf[k] - l.pendingCommittedOf[k]
}

// NotifyRecount sets what the ledger calls when a bucket's tally holds more
// than the tallied claims it has seen, with the namespace of the bucket's
// claims (see Recounter). Called with the ledger's lock held: it must only
// queue.
func (l *Ledger) NotifyRecount(recount func(namespace string, k BucketKey)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recount = recount
}

// RecountDelay is how long a recount waits after its bucket's tally was
// found to hold more than the claims seen: time for the informers to
// deliver claims other replicas stored.
const RecountDelay = 10 * time.Second

type recountItem struct {
	namespace string
	bucket    BucketKey
}

// needsRecount reports whether k's tally, as the ledger knows it, holds more
// than the tallied claims it has seen and its own stored ones not seen yet.
func (l *Ledger) needsRecount(k BucketKey) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	ts, ok := l.tallies[k]
	return ok && l.aboveSeenLocked(k, ts.value)
}

// aboveSeenLocked reports whether tally holds more than k's tallied claims
// the ledger has seen and its own stored ones not seen yet.
func (l *Ledger) aboveSeenLocked(k BucketKey, tally int64) bool {
	return tally > l.talliedAllocated[k]+l.pendingCommittedOf[k]
}

// Recounter sets right the tallies of buckets whose tally holds more than
// the tallied claims the ledger has seen, once RecountDelay has passed: it
// counts the claims in storage (recount, tenantstorage.Joints.Recount of
// the claims) and writes the tally where it differs and did not move since.
// One queue and one worker for the server; a bucket waits in it at most
// once.
type Recounter struct {
	ledger  *Ledger
	queue   workqueue.TypedRateLimitingInterface[recountItem]
	recount func(ctx context.Context, namespace, key string) (bool, error)
}

// NewRecounter returns the recounter of ledger's tallies, counting with recount.
func NewRecounter(ledger *Ledger, recount func(ctx context.Context, namespace, key string) (bool, error)) *Recounter {
	r := &Recounter{ledger: ledger, recount: recount, queue: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[recountItem](RecountDelay, 10*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[recountItem]{Name: "quota_tally_recount"})}
	ledger.NotifyRecount(func(namespace string, k BucketKey) { r.queue.AddAfter(recountItem{namespace, k}, RecountDelay) })
	return r
}

// Run recounts until ctx ends.
func (r *Recounter) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	for {
		item, quit := r.queue.Get()
		if quit {
			return
		}
		r.process(ctx, item)
		r.queue.Done(item)
	}
}

// process recounts one bucket, unless the ledger has since seen what its
// tally holds (the claims were another replica's, not delivered yet). A
// recount that failed is tried again later, less and less often; one whose
// write lost to a create or delete (the tally moved) waits for the next
// refusal to ask again.
func (r *Recounter) process(ctx context.Context, item recountItem) {
	if !r.ledger.needsRecount(item.bucket) {
		r.queue.Forget(item)
		return
	}
	key := TallyKey(item.bucket)
	wrote, err := r.recount(ctx, item.namespace, key)
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		klog.ErrorS(err, "Counting a quota bucket's tallied claims again", "bucket", key)
		r.queue.AddRateLimited(item)
	case wrote:
		klog.InfoS("A quota bucket's tally was not what its tallied claims hold: set to what they hold", "bucket", key)
		r.queue.Forget(item)
	default:
		r.queue.Forget(item)
	}
}
