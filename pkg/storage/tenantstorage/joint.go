package tenantstorage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3/metrics"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Joints stores objects together with a create, in one etcd transaction:
// the create and its companions (a quota claim of the object) are all
// stored or none is, with one durable write. It knows the stores of the
// resources companions are of, to encode them as their own storage would.
//
// Only etcd commits several keys in one transaction: on SQL storage (kine
// accepts one key per transaction) a server has no Joints, and callers
// store companions with writes of their own.
type Joints struct {
	kv        clientv3.KV
	resources map[schema.GroupResource]bool
	// elsewhere are resources kept in another etcd than kv: neither stored
	// as companions nor storing any.
	elsewhere map[schema.GroupResource]bool
	mu        sync.RWMutex
	stores    map[schema.GroupResource]*store
	// tallied are the resources whose objects are counted in tallies,
	// with what each object adds to them (see Tallied).
	tallied map[schema.GroupResource]TalliesOf
	// turns are this server's transactions moving tallies, one at a time
	// per tally.
	turns turns
	// maxOps is etcd's --max-txn-ops (0: its default).
	maxOps int
	// lives, if not nil, makes creates in a project require that it
	// lives (see RequireLiveProjects).
	lives *lives
}

// SetMaxTxnOps tells the Joints how many compares, and how many
// operations, etcd accepts in one transaction (its --max-txn-ops): the
// writes waiting for the same tallies are committed together up to that.
// Call it before the storage serves.
func (j *Joints) SetMaxTxnOps(n int) {
	j.maxOps = n
}

func (j *Joints) maxTxnOps() int {
	if j.maxOps <= 0 {
		return DefaultMaxTxnOps
	}
	return j.maxOps
}

// Elsewhere tells the Joints of resources kept in another etcd than theirs
// (--etcd-servers-overrides), which their transactions do not reach: no
// companion is stored with a create of one, nor is one a companion. A
// resource of "*" stands for every resource of its group. Call it before the
// storage is built.
func (j *Joints) Elsewhere(resources ...schema.GroupResource) {
	if j.elsewhere == nil {
		j.elsewhere = map[schema.GroupResource]bool{}
	}
	for _, gr := range resources {
		j.elsewhere[gr] = true
	}
}

// reaches reports whether the Joints' transactions reach gr's storage.
func (j *Joints) reaches(gr schema.GroupResource) bool {
	return j != nil && !KeptElsewhere(j.elsewhere, gr)
}

// KeptElsewhere tells whether elsewhere, the resources
// --etcd-servers-overrides keeps in another etcd, holds gr: named alone or
// with every resource of its group ("group/*"), as upstream's storage
// factory applies an override.
func KeptElsewhere(elsewhere map[schema.GroupResource]bool, gr schema.GroupResource) bool {
	return elsewhere[gr] || elsewhere[schema.GroupResource{Group: gr.Group, Resource: "*"}]
}

// NewJoints returns the joint writer over kv, the server's etcd, for
// companions of the resources named.
func NewJoints(kv clientv3.KV, resources ...schema.GroupResource) *Joints {
	j := &Joints{kv: kv, resources: map[schema.GroupResource]bool{}, stores: map[schema.GroupResource]*store{}, tallied: map[schema.GroupResource]TalliesOf{}}
	for _, gr := range resources {
		j.resources[gr] = true
	}
	return j
}

func (j *Joints) add(gr schema.GroupResource, s *store) {
	if j == nil || !j.resources[gr] || !j.reaches(gr) {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.stores[gr] = s // the latest: a custom resource's storage is rebuilt when its definition changes
}

// talliesOf returns what an object of gr holds of tallies, or nil when gr
// is not counted in any (or j is nil).
func (j *Joints) talliesOf(gr schema.GroupResource) TalliesOf {
	if j == nil || !j.reaches(gr) {
		return nil
	}
	return j.tallied[gr]
}

func (j *Joints) storeOf(gr schema.GroupResource) *store {
	j.mu.RLock()
	defer j.mu.RUnlock()
	return j.stores[gr]
}

// Companion is an object to store with a create, its namespace, name and
// uid set: a platform object, or an object of the project Tenant names
// (with its storage id), stored under that project's key segment and
// stamped as its own.
type Companion struct {
	Resource schema.GroupResource
	Object   runtime.Object
	// Tenant is the platform, or the project the object belongs to.
	Tenant tenancy.Tenant
}

// Joint is what one create request may store with its object. The
// request's handler holds one (Wrap); an admission plugin adds companions
// to it, and the object's create stores them.
type Joint struct {
	joints     *Joints
	mu         sync.Mutex
	state      jointState
	uid        types.UID
	companions []Companion
	release    func()
	together   func()
	guard      TallyGuard
}

// Tally is one count kept in storage beside the objects it counts, under
// the storage prefix at Key: what the objects of one quota bucket hold,
// which every replica of the server reads and moves in the transactions
// that store and delete those objects.
type Tally struct {
	// Key is the tally's key under the storage prefix.
	Key string
	// Revision is the key's last write (0: the key does not exist) and
	// Value what it holds there (0 for a key that does not exist).
	Revision, Value int64
	// Add is what a write adds to the tally (negative to take away).
	Add int64
	// Keep says the tally is kept at zero rather than deleted, and that
	// its absence is not a count of zero: a usage tally is absent until a
	// count writes it, so a delete finding it absent leaves it so.
	Keep bool
}

// TallyGuard keeps the tallies a create moves with its object, each under a
// limit. The create's transaction requires each tally at the revision the
// guard expects and adds to it; when one moved (another create or delete,
// on any replica), the guard is told what they hold now and decides again.
type TallyGuard interface {
	// Keys returns the keys of the tallies Expect returns, which do not
	// change from one round to the next.
	Keys() []string
	// Expect returns the tallies the create moves, as the guard last knew
	// them, and what it adds to each. ahead, when set, is what writes
	// committed before it in the same transaction add to each (in Keys'
	// order): the guard then expects a revision no tally has (-1) where the
	// create does not fit after them, or where it would not alone.
	Expect(ahead []int64) []Tally
	// Moved tells the guard what the tallies hold now (their Add unset).
	// It answers nil to try again, or the error to answer the create with
	// (the create is then refused and its companions released).
	Moved(now []Tally) error
	// Stored tells the guard the create was stored, and what the tallies
	// hold since (in Keys' order): their revision is the transaction's, or
	// 0 where it deleted one.
	Stored(now []Tally)
}

// maxTallyRounds bounds how many times a create asks its guard again.
const maxTallyRounds = 32

// TalliesOf returns, given an object being deleted, what it holds of each
// tally (Add, positive), which its delete takes away in the same
// transaction, and a key (a mark, under the storage prefix) the delete
// writes too, if any: where a count of those objects being made meanwhile
// looks, to count again.
type TalliesOf func(runtime.Object) (held []Tally, mark string)

// Tallied makes objects of gr counted in tallies, as of says. Call it
// before the storage is built.
func (j *Joints) Tallied(gr schema.GroupResource, of TalliesOf) {
	j.tallied[gr] = of
}

// Tally adds g to the guards of the tallies the create moves with its
// companions (a guard of its quota claims', one of its consumer's count);
// call it after Add for the same object. It reports false, and sets
// nothing, when the request holds no companions.
func (j *Joint) Tally(g TallyGuard) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.state != held {
		return false
	}
	j.guard = bothGuards(j.guard, g)
	return true
}

type jointState int

const (
	// empty: nothing held; companions may be added.
	empty jointState = iota
	// held: companions wait for the create of the object with uid.
	held
	// taken: a create is storing them, or stored them, or cannot tell.
	taken
	// ended: the request is over; nothing more may be added.
	ended
)

type jointKey struct{}

// Wrap gives every create of an object (a POST, not of a subresource) a
// Joint, and at the end of the request releases companions no create
// took. A server without Joints gives none.
func (j *Joints) Wrap(handler http.Handler) http.Handler {
	if j == nil {
		return handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		if !ok || !info.IsResourceRequest || info.Verb != "create" || info.Subresource != "" {
			handler.ServeHTTP(w, req)
			return
		}
		joint := &Joint{joints: j}
		defer joint.finish()
		handler.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), jointKey{}, joint)))
	})
}

// JointFrom returns the request's Joint, or nil where companions cannot be
// stored with the create (SQL storage, a request that is not a create).
func JointFrom(ctx context.Context) *Joint {
	j, _ := ctx.Value(jointKey{}).(*Joint)
	return j
}

// Add asks that companions be stored with the create of the object with
// uid. release (if set) is called when they were certainly not stored (the
// create failed or never reached storage); together (if set) just before
// the transaction that stores them with the object (not when they are
// stored apart, before an object that expires). Several callers may add for
// the one object (a project's bootstrap, then its quota claim). It reports
// false, and adds nothing, when the request holds companions of another
// object, has ended, or a companion's storage is not built yet or is not
// one of the resources the Joints were made for: the caller then stores
// them itself.
func (j *Joint) Add(uid types.UID, companions []Companion, release, together func()) bool {
	for _, c := range companions {
		if j.joints.storeOf(c.Resource) == nil {
			return false
		}
		if c.Tenant.IsProject() && !tenancy.ValidProjectID(c.Tenant.ID) {
			return false
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if uid == "" || (j.state != empty && (j.state != held || j.uid != uid)) {
		return false
	}
	j.state, j.uid = held, uid
	j.companions = append(j.companions, companions...)
	j.release = chain(j.release, release)
	j.together = chain(j.together, together)
	return true
}

// chain is a then b, either nil.
func chain(a, b func()) func() {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func() { a(); b() }
}

// take returns the companions to store with obj's create, once, or nil.
// It refuses the create of an object whose companions were released
// because its request ended first (the server answered a timeout while the
// create went on): stored without them, it would escape its quota.
func (j *Joint) take(obj runtime.Object) ([]Companion, TallyGuard, error) {
	if j == nil {
		return nil, nil, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.uid == "" || m.GetUID() != j.uid {
		return nil, nil, nil
	}
	switch j.state {
	case held:
		j.state = taken
		return j.companions, j.guard, nil
	case ended:
		return nil, nil, apierrors.NewTimeoutError("the request ended before its object was stored", 0)
	}
	return nil, nil, nil
}

// failed releases the companions of a create that certainly stored
// nothing. The request may try again (the server retries a create too
// large to store without its managed fields): its admission may add anew.
func (j *Joint) failed() {
	if j == nil {
		return
	}
	j.mu.Lock()
	release := j.release
	if j.state == taken {
		j.state, j.uid, j.companions, j.release, j.together, j.guard = empty, "", nil, nil, nil, nil
	} else {
		release = nil
	}
	j.mu.Unlock()
	if release != nil {
		release()
	}
}

// finish ends the request: companions no create took are released (and
// their create, should it still come, refused: see take).
func (j *Joint) finish() {
	j.mu.Lock()
	release := j.release
	if j.state != held {
		release = nil
	}
	if j.state != taken {
		j.state = ended
	}
	j.mu.Unlock()
	if release != nil {
		release()
	}
}

// notApplied reports whether err, from a transaction, says etcd refused it
// before applying anything: a request too large or malformed, or one the
// client could not send.
func notApplied(err error) bool {
	var coded interface{ Code() codes.Code }
	if errors.As(err, &coded) && coded.Code() == codes.InvalidArgument {
		return true
	}
	st, ok := status.FromError(err)
	return ok && (st.Code() == codes.InvalidArgument || st.Code() == codes.ResourceExhausted)
}

// etcdKey is key as the etcd store writes it, under the storage prefix.
func (s *store) etcdKey(key string) string {
	return s.pathPrefix + strings.TrimPrefix(key, "/")
}

// encodeForStorage is obj as the etcd store writes it at key: without a
// resource version, encoded by the resource's codec and transformed.
func (s *store) encodeForStorage(ctx context.Context, key string, obj runtime.Object) (plain, stored []byte, err error) {
	if rv, err := versioner.ObjectResourceVersion(obj); err == nil && rv != 0 {
		return nil, nil, storage.ErrResourceVersionSetOnCreate
	}
	return s.encode(ctx, key, obj)
}

// encode is obj as the etcd store writes it at key, its resource version
// cleared (an update's): encoded by the resource's codec, and transformed.
func (s *store) encode(ctx context.Context, key string, obj runtime.Object) (plain, stored []byte, err error) {
	if err := versioner.PrepareObjectForStorage(obj); err != nil {
		return nil, nil, fmt.Errorf("PrepareObjectForStorage failed: %w", err)
	}
	plain, err = runtime.Encode(s.codec, obj)
	if err != nil {
		return nil, nil, err
	}
	stored, err = s.transformer.TransformToStorage(ctx, plain, value.DefaultContext(key))
	return plain, stored, err
}

// decodeStored is the object stored at key (its etcd key) as value, at
// revision: untransformed and decoded as the etcd store reads it; plain is
// its encoding, and stale says it was written under an older key of
// encryption at rest.
func (s *store) decodeStored(ctx context.Context, key string, stored []byte, revision int64) (plain []byte, obj runtime.Object, stale bool, err error) {
	plain, stale, err = s.transformer.TransformFromStorage(ctx, stored, value.DefaultContext(key))
	if err != nil {
		return nil, nil, false, storage.NewInternalError(err)
	}
	obj = s.newFunc()
	if err := s.decoder.Decode(plain, obj, revision); err != nil {
		return nil, nil, false, err
	}
	return plain, obj, stale, nil
}

// companionOp is the put of c, at its tenant, and its key.
func (j *Joints) companionOp(ctx context.Context, c Companion) (string, clientv3.Op, error) {
	s := j.storeOf(c.Resource)
	if s == nil {
		return "", clientv3.Op{}, fmt.Errorf("no storage of %s is built yet", c.Resource)
	}
	m, err := meta.Accessor(c.Object)
	if err != nil {
		return "", clientv3.Op{}, err
	}
	tenancy.Stamp(m, c.Tenant)
	key, err := s.keyFunc(c.Object)
	if err != nil {
		return "", clientv3.Op{}, err
	}
	key = s.etcdKey(key)
	_, data, err := s.encodeForStorage(ctx, key, c.Object)
	if err != nil {
		return "", clientv3.Op{}, err
	}
	return key, clientv3.OpPut(key, string(data)), nil
}

// companionOps are the puts of companions, each on the condition that its
// key is new.
func (j *Joints) companionOps(ctx context.Context, companions []Companion) ([]clientv3.Cmp, []clientv3.Op, error) {
	var ifs []clientv3.Cmp
	var thens []clientv3.Op
	for _, c := range companions {
		k, op, err := j.companionOp(ctx, c)
		if err != nil {
			return nil, nil, apierrors.NewInternalError(fmt.Errorf("storing %s with the object: %w", c.Resource, err))
		}
		ifs = append(ifs, clientv3.Compare(clientv3.ModRevision(k), "=", 0))
		thens = append(thens, op)
	}
	return ifs, thens, nil
}

// jointCreate stores obj at key (its tenant's) with companions, in one
// transaction that requires every key to be new, and a project's object
// its project to live, and moves the tallies guard keeps; it answers as
// the etcd store's Create does. j is nil for a create with no companions.
func (s *store) jointCreate(ctx context.Context, key string, obj, out runtime.Object, companions []Companion, j *Joint, guard TallyGuard) (err error) {
	// Recorded as upstream's Create records its request.
	defer func(start time.Time) { metrics.RecordEtcdRequest("create", s.resource, err, start) }(time.Now())
	full := s.etcdKey(key)
	ifs, thens, err := s.joints.companionOps(ctx, companions)
	if err != nil {
		j.failed()
		return err
	}
	plain, data, err := s.encodeForStorage(ctx, full, obj)
	if err != nil {
		j.failed()
		return err
	}
	ifs = append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(full), "=", 0)}, ifs...)
	thens = append(append([]clientv3.Op{clientv3.OpPut(full, string(data))}, thens...), s.createdLives(obj)...)
	elses := []clientv3.Op{clientv3.OpGet(full, clientv3.WithCountOnly())}
	var othersFailed func(*clientv3.TxnResponse) bool
	lives := s.livesKey(ctx)
	if lives != "" {
		ifs = append(ifs, clientv3.Compare(clientv3.CreateRevision(lives), ">", 0))
		elses = append(elses, clientv3.OpGet(lives, clientv3.WithCountOnly()))
		othersFailed = func(resp *clientv3.TxnResponse) bool {
			return anyFound(resp.Responses[:1]) || livesGone(resp.Responses[1])
		}
	}
	if j != nil && j.together != nil {
		j.together()
	}
	for revived := false; ; revived = true {
		resp, refused, err := s.commitTallied(ctx, guard, ifs, thens, othersFailed, elses...)
		if err != nil {
			if refused || notApplied(err) {
				j.failed()
			} // else stored or not, unknown: the companions' reader settles it
			return err
		}
		if resp.Succeeded {
			return s.decoder.Decode(plain, out, resp.Header.Revision)
		}
		if lives != "" && livesGone(resp.Responses[1]) {
			if !revived {
				if err := s.joints.revive(ctx); err == nil {
					continue
				} else if !apierrors.IsNotFound(err) {
					j.failed()
					return err
				}
			}
			j.failed()
			return projectGone(ctx)
		}
		j.failed()
		if r := resp.Responses[0].GetResponseRange(); r != nil && r.Count > 0 {
			return storage.NewKeyExistsError(full, 0)
		}
		return apierrors.NewConflict(s.resource, path.Base(key), fmt.Errorf("what is stored with the object exists already"))
	}
}

// companionsFirst stores companions in a transaction of their own, before
// an object the joint transaction cannot write (one that expires: etcd
// leases are the store's own). A create that then fails leaves them to
// their reader, as a companion stored by its own request would be.
func (s *store) companionsFirst(ctx context.Context, companions []Companion, j *Joint, guard TallyGuard) error {
	ifs, thens, err := s.joints.companionOps(ctx, companions)
	if err != nil {
		j.failed()
		return err
	}
	resp, refused, err := s.commitTallied(ctx, guard, ifs, thens, nil)
	if err != nil {
		if refused || notApplied(err) {
			j.failed()
		}
		return err
	}
	if !resp.Succeeded {
		j.failed()
		return apierrors.NewConflict(s.resource, "", fmt.Errorf("what is stored with the object exists already"))
	}
	return nil
}

// commitTallied runs the transaction ifs → thens (else elses) with the
// tallies guard (if any) expects, each required at its revision and moved
// by its Add, in the tallies' turn, perhaps with other writes of the same
// tallies in one transaction (batch.go). While it fails on a tally only,
// it asks the guard again with what the tallies hold (out of turn: the
// guard may count in storage, which must not hold up the server's other
// writes of those tallies). othersFailed, given the failed transaction's
// answer, says whether what else ifs require failed (nil: whether any of
// elses' reads found a key); then the guard is not asked. It returns the
// answer of the last round, whose responses, when it failed, begin with
// elses'; refused says an error is the guard's (or too many rounds):
// nothing was stored.
func (s *store) commitTallied(ctx context.Context, guard TallyGuard, ifs []clientv3.Cmp, thens []clientv3.Op,
	othersFailed func(*clientv3.TxnResponse) bool, elses ...clientv3.Op) (_ *clientv3.TxnResponse, refused bool, _ error) {
	w := &talliedTxn{ctx: ctx, guard: guard, ifs: ifs, thens: thens, othersFailed: othersFailed, elses: elses}
	if guard != nil {
		w.keys = guard.Keys()
	}
	for rounds, lost := 1, 0; ; {
		var r round
		if len(w.keys) == 0 {
			r = s.commitBatch(ctx, []*talliedTxn{w}, nil)
		} else {
			r = s.batchRound(ctx, w)
		}
		if r.again {
			continue // not committed: its turn anew
		}
		if r.err != nil || !r.moved {
			return r.resp, r.unsent, r.err
		}
		// A round lost to another write's own failure (its key
		// existed) is not one the tallies moved in: a burst of creates
		// of names that exist does not use up this write's rounds, up
		// to as many such rounds again.
		if r.lost {
			lost++
		}
		if !r.lost || lost > maxTallyRounds {
			if rounds == maxTallyRounds {
				return nil, true, apierrors.NewTooManyRequests("the quota this write is charged to was changed by other requests at each of its tries: retry", 1)
			}
			rounds++
		}
		if err := guard.Moved(r.now); err != nil {
			return nil, true, err
		}
	}
}

// anyFound reports whether any of reads found a key.
func anyFound(reads []*etcdserverpb.ResponseOp) bool {
	for _, r := range reads {
		if rr := r.GetResponseRange(); rr != nil && rr.Count > 0 {
			return true
		}
	}
	return false
}

// tallyOps are the compares that require each tally at its revision, the
// writes that move it by its Add (a tally that comes to nothing is
// deleted), and the reads of what they hold.
func (s *store) tallyOps(tallies []Tally) (ifs []clientv3.Cmp, thens, reads []clientv3.Op) {
	for _, t := range tallies {
		k := s.etcdKey(t.Key)
		ifs = append(ifs, clientv3.Compare(clientv3.ModRevision(k), "=", t.Revision))
		switch v := t.Value + t.Add; {
		case t.Keep && t.Revision == 0 && t.Add <= 0:
			// Absent: not counted yet, nothing to take from.
		case v > 0 || (t.Keep && v == 0):
			thens = append(thens, clientv3.OpPut(k, strconv.FormatInt(v, 10)))
		default:
			thens = append(thens, clientv3.OpDelete(k))
		}
		reads = append(reads, clientv3.OpGet(k))
	}
	return ifs, thens, reads
}

// talliesRead returns what the reads of tallies (tallyOps) found, and
// whether any is not as expected.
func talliesRead(tallies []Tally, resps []*etcdserverpb.ResponseOp) ([]Tally, bool, error) {
	now := make([]Tally, len(tallies))
	moved := false
	for i, t := range tallies {
		now[i] = Tally{Key: t.Key, Keep: t.Keep}
		if i < len(resps) {
			if r := resps[i].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
				v, err := strconv.ParseInt(string(r.Kvs[0].Value), 10, 64)
				if err != nil {
					return nil, false, apierrors.NewInternalError(fmt.Errorf("the tally at %s holds %q, not a number", t.Key, r.Kvs[0].Value))
				}
				now[i].Revision, now[i].Value = r.Kvs[0].ModRevision, v
			}
		}
		moved = moved || now[i].Revision != t.Revision || now[i].Value != t.Value
	}
	return now, moved, nil
}

// Recount sets the tally at key to what the objects of gr in namespace (at
// the platform) hold of it, where it holds anything else, on the condition
// that it did not move since they were read: every create and delete of a
// tallied object moves it, so it is then what they hold. It is what sets a
// tally right that something left wrong (a tallied object deleted by a
// server without tallies, or unsafely). It reports whether it wrote.
func (j *Joints) Recount(ctx context.Context, gr schema.GroupResource, namespace, key string) (bool, error) {
	s, of := j.storeOf(gr), j.talliesOf(gr)
	if s == nil || of == nil {
		return false, nil
	}
	full := s.etcdKey(key)
	prefix := s.etcdKey(s.prefix + "/" + tenancy.PlatformSegment + "/" + namespace + "/")
	end := clientv3.GetPrefixRangeEnd(prefix)
	first, err := j.kv.Txn(ctx).Then(clientv3.OpGet(full), clientv3.OpGet(prefix, clientv3.WithRange(end), clientv3.WithLimit(recountPage))).Commit()
	if err != nil {
		return false, err
	}
	was, _, err := talliesRead([]Tally{{Key: key}}, first.Responses[:1])
	if err != nil {
		return false, err
	}
	var sum int64
	page := first.Responses[1].GetResponseRange()
	for {
		for _, kv := range page.Kvs {
			_, obj, _, err := s.decodeStored(ctx, string(kv.Key), kv.Value, kv.ModRevision)
			if err != nil {
				return false, fmt.Errorf("decoding %s: %w", kv.Key, err)
			}
			held, _ := of(obj)
			for _, t := range held {
				if t.Key == key {
					sum += t.Add
				}
			}
		}
		if !page.More || len(page.Kvs) == 0 {
			break
		}
		next, err := j.kv.Get(ctx, string(page.Kvs[len(page.Kvs)-1].Key)+"\x00", clientv3.WithRange(end), clientv3.WithLimit(recountPage), clientv3.WithRev(first.Header.Revision))
		if err != nil {
			return false, err
		}
		page = (*etcdserverpb.RangeResponse)(next)
	}
	if sum == was[0].Value {
		return false, nil
	}
	op := clientv3.OpDelete(full)
	if sum > 0 {
		op = clientv3.OpPut(full, strconv.FormatInt(sum, 10))
	}
	resp, err := j.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(full), "=", was[0].Revision)).Then(op).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// recountPage is how many objects a recount reads at a time.
const recountPage = 500

// talliedDelete deletes an object counted in tallies and takes what it
// holds (of, given the object and its size as stored) from them, in one
// transaction, on the condition that neither the object nor the tallies
// changed since they were read; it answers as
// the etcd store's Delete does. The mark of says, if any, is a key the
// delete writes too (see deletesMark). done, if set, is told the tallies
// as the delete left them.
func (s *store) talliedDelete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, of func(obj runtime.Object, size int64) ([]Tally, string), done func([]Tally)) error {
	full := s.etcdKey(key)
	for round := 1; ; round++ {
		got, err := s.joints.kv.Get(ctx, full)
		if err != nil {
			return err
		}
		if len(got.Kvs) == 0 {
			return storage.NewKeyNotFoundError(full, 0)
		}
		kv := got.Kvs[0]
		plain, obj, _, err := s.decodeStored(ctx, full, kv.Value, kv.ModRevision)
		if err != nil {
			return err
		}
		if preconditions != nil {
			if err := preconditions.Check(full, obj); err != nil {
				return err
			}
		}
		if err := validateDeletion(ctx, obj); err != nil {
			return err
		}
		held, mark := of(obj, int64(len(plain)))
		resp, now, err := s.deleteTallied(ctx, full, kv.ModRevision, mark, held)
		if err != nil {
			return err
		}
		if resp.Succeeded {
			if done != nil {
				for i := range now {
					now[i] = applied(now[i], resp.Header.Revision)
				}
				done(now)
			}
			return s.decoder.Decode(plain, out, resp.Header.Revision)
		}
		if round == maxTallyRounds {
			return apierrors.NewTooManyRequests("the object and the quota it holds were changed by other requests at each of its tries: retry", 1)
		}
	}
}

// deleteTallied deletes the object at full, if it is still at revision,
// and takes from the tallies what it held of them, read first, in one
// transaction, in the tallies' turn: it returns the transaction's answer
// and the tallies as read, with what the delete adds to them.
func (s *store) deleteTallied(ctx context.Context, full string, revision int64, mark string, held []Tally) (*clientv3.TxnResponse, []Tally, error) {
	keys := make([]string, len(held))
	for i, t := range held {
		keys[i] = t.Key
	}
	done, _, err := s.joints.turns.take(ctx, keys, nil)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	var now []Tally
	if len(held) > 0 {
		_, _, reads := s.tallyOps(held)
		read, err := s.joints.kv.Txn(ctx).Then(reads...).Commit()
		if err != nil {
			return nil, nil, err
		}
		if now, _, err = talliesRead(held, read.Responses); err != nil {
			return nil, nil, err
		}
		for i := range now {
			now[i].Add = -held[i].Add
		}
	}
	tIfs, tThens, _ := s.tallyOps(now)
	if mark != "" {
		tThens = append(tThens, clientv3.OpPut(s.etcdKey(mark), ""))
	}
	resp, err := s.joints.kv.Txn(ctx).If(append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(full), "=", revision)}, tIfs...)...).
		Then(append([]clientv3.Op{clientv3.OpDelete(full)}, tThens...)...).Commit()
	return resp, now, err
}

// transformerOf is the transformer the etcd store uses for a resource.
func transformerOf(t value.Transformer) value.Transformer {
	if t == nil {
		return identity.NewEncryptCheckTransformer()
	}
	return t
}
