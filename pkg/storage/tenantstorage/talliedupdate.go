package tenantstorage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3/metrics"
)

// errCountedSince ends an attempt of upstream's update whose project's
// usage came to be counted in storage since the update began: it is made
// again by talliedUpdate.
var errCountedSince = errors.New("the project's usage is counted in storage since the update began")

// createsInProject ends an attempt of upstream's update that would create
// an object in a project that must live (see RequireLiveProjects): it is
// committed by talliedUpdate, whose transaction requires the project,
// with out, what the attempt's update made, unless the object appeared
// meanwhile.
type createsInProject struct {
	out runtime.Object
	ttl *uint64
}

func (*createsInProject) Error() string {
	return "the update creates an object in a project that must live"
}

// usageTallied reports whether an update in ctx's project moves its usage
// counted in storage this store's transactions reach: every update, where
// its bytes are counted; one that may create, where its objects are. Such
// an update stores the object and the tallies in one transaction
// (talliedUpdate). It holds nothing: each attempt of the update begins
// its metered write again, after its admission.
func (s *store) usageTallied(ctx context.Context, mayCreate bool) (bool, error) {
	if !s.joints.reaches(s.resource) {
		return false, nil
	}
	w, err := s.begin(ctx, false)
	if err != nil || w == nil {
		return false, err
	}
	defer w.End(false)
	return s.updateMovesTallies(w, mayCreate), nil
}

// updateMovesTallies reports whether an update in w's project, creating an
// object or not, moves its counts in storage.
func (s *store) updateMovesTallies(w MeteredWrite, creates bool) bool {
	tw, tally := s.objectsTally(w)
	return tally != "" && (creates || tw.BytesTally() != "")
}

// current is an object as read for an update: decoded, its encoding, its
// revision (0: not stored), and whether its stored form is stale (written
// under an older key of encryption at rest).
type current struct {
	obj   runtime.Object
	plain []byte
	rev   int64
	stale bool
}

// talliedUpdate is GuaranteedUpdate for a project whose usage is counted
// in storage: each attempt stores the object and moves the project's
// tallies (one more object for an update that creates; the bytes it adds
// or frees, where bytes are counted) in one transaction, on the condition
// that the object is still at the revision the attempt read. It answers as
// the etcd store's GuaranteedUpdate does; unlike it, it always reads the
// object first (a cached copy is not trusted for the sizes it moves).
func (s *store) talliedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, creates *createsInProject) error {
	full := s.etcdKey(key)
	load := func() (*current, error) {
		got, err := s.joints.kv.Get(ctx, full)
		if err != nil {
			return nil, err
		}
		if len(got.Kvs) == 0 && !ignoreNotFound {
			return nil, storage.NewKeyNotFoundError(full, 0)
		}
		return s.readCurrent(ctx, full, got.Kvs)
	}
	var cur *current
	var err error
	if creates != nil {
		// Upstream's attempt found the object absent and made it: its
		// first commit here requires it still absent (as any attempt
		// requires the object at the revision it read), so neither the
		// read nor the update (admission) is made again.
		cur = &current{obj: s.newFunc()}
	} else if cur, err = load(); err != nil {
		return err
	}
	for {
		if err := preconditions.Check(full, cur.obj); err != nil {
			return err
		}
		var old runtime.Object
		if cur.rev != 0 {
			old = cur.obj.DeepCopyObject()
		}
		var out runtime.Object
		var ttl *uint64
		if creates != nil {
			out, ttl, creates = creates.out, creates.ttl, nil
		} else if out, ttl, err = tryUpdate(cur.obj, storage.ResponseMeta{ResourceVersion: uint64(cur.rev)}); err != nil {
			return err
		}
		if ttl != nil && *ttl != 0 {
			// Objects that expire (Events) are not metered.
			return storage.NewInternalError(fmt.Errorf("an object of %s that expires cannot be counted in its project's quota", s.resource))
		}
		if err := stamp(ctx, out); err != nil {
			return err
		}
		plain, data, err := s.encode(ctx, full, out)
		if err != nil {
			return err
		}
		if cur.rev != 0 && !cur.stale && bytes.Equal(plain, cur.plain) {
			// Nothing changes: nothing is written, as upstream.
			return s.decoder.Decode(cur.plain, destination, cur.rev)
		}
		revision, err := s.commitUpdate(ctx, key, full, cur, old, out, plain, data)
		if errors.Is(err, errNotLive) {
			// A live project without its lives key is given it, and the
			// same attempt is committed again (its admission not rerun).
			if err := s.joints.revive(ctx); err != nil {
				return err
			}
			if revision, err = s.commitUpdate(ctx, key, full, cur, old, out, plain, data); errors.Is(err, errNotLive) {
				return projectGone(ctx)
			}
		}
		if err != nil {
			return err
		}
		if revision != 0 {
			return s.decoder.Decode(plain, destination, revision)
		}
		// The object moved since this attempt read it: again, from what
		// it is now.
		if cur, err = load(); err != nil {
			return err
		}
	}
}

// commitUpdate stores one attempt of talliedUpdate, metered: it returns
// the write's revision, or 0 when the object moved since the attempt read
// it (the tallies did not, or commitTallied would have decided again).
func (s *store) commitUpdate(ctx context.Context, key, full string, cur *current, old, out runtime.Object, plain, data []byte) (_ int64, err error) {
	defer func(start time.Time) { metrics.RecordEtcdRequest("update", s.resource, err, start) }(time.Now())
	w, err := s.begin(ctx, false)
	if err != nil {
		return 0, err
	}
	if w == nil {
		// No longer metered (its grant went meanwhile).
		w = unmeteredWrite{}
	}
	stored := false
	defer func() { w.End(stored) }()
	var objects int64
	if cur.rev == 0 {
		objects = 1
	}
	// What the update adds to the project's bytes, as stored.
	size := int64(len(plain)) - int64(len(cur.plain))
	tw, tally := s.objectsTally(w)
	if !w.Sizes() && (tally == "" || tw.BytesTally() == "") {
		size = 0
	}
	ok := refusable(ctx, old, out)
	if err := w.Charge(objects, size, ok); err != nil {
		return 0, s.refused(key, err)
	}
	var guard TallyGuard
	if tally != "" && (objects != 0 || (tw.BytesTally() != "" && size != 0)) {
		guard = tw.Guard(objects, size, ok)
	}
	// The object moved (another write, or its delete) since the attempt
	// read it: the attempt is made again, whatever the tallies hold; the
	// guard decides only for an object as the attempt read it.
	moved := func(resp *clientv3.TxnResponse) bool {
		r := resp.Responses[0].GetResponseRange()
		if len(r.Kvs) == 0 {
			return cur.rev != 0 // deleted
		}
		return r.Kvs[0].ModRevision != cur.rev // written, or created
	}
	ifs := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(full), "=", cur.rev)}
	elses := []clientv3.Op{clientv3.OpGet(full, clientv3.WithKeysOnly())}
	failed := moved
	lives := ""
	if cur.rev == 0 {
		// It creates: its project must live (an update of a stored
		// object requires the object, which the purge deletes).
		lives = s.livesKey(ctx)
	}
	if lives != "" {
		ifs = append(ifs, clientv3.Compare(clientv3.CreateRevision(lives), ">", 0))
		elses = append(elses, clientv3.OpGet(lives, clientv3.WithCountOnly()))
		failed = func(resp *clientv3.TxnResponse) bool { return moved(resp) || livesGone(resp.Responses[1]) }
	}
	resp, refused, err := s.commitTallied(ctx, guard, ifs, []clientv3.Op{clientv3.OpPut(full, string(data))}, failed, elses...)
	if err != nil {
		if refused {
			return 0, s.asRefusal(key, err)
		}
		// Stored or not, the object and its counts are stored together:
		// what the server knows of the counts is read again when a
		// transaction finds them moved.
		return 0, err
	}
	if !resp.Succeeded {
		if lives != "" && !moved(resp) && livesGone(resp.Responses[1]) {
			return 0, errNotLive
		}
		return 0, nil
	}
	stored = true
	return resp.Header.Revision, nil
}

// readCurrent is the object stored at full (kvs: the read of it; none: a
// new object).
func (s *store) readCurrent(ctx context.Context, full string, kvs []*mvccpb.KeyValue) (*current, error) {
	if len(kvs) == 0 {
		return &current{obj: s.newFunc()}, nil
	}
	plain, obj, stale, err := s.decodeStored(ctx, full, kvs[0].Value, kvs[0].ModRevision)
	if err != nil {
		return nil, err
	}
	return &current{obj: obj, plain: plain, rev: kvs[0].ModRevision, stale: stale}, nil
}

// unmeteredWrite is the write of a project no longer metered.
type unmeteredWrite struct{}

func (unmeteredWrite) Sizes() bool                     { return false }
func (unmeteredWrite) Charge(_, _ int64, _ bool) error { return nil }
func (unmeteredWrite) End(bool)                        {}
