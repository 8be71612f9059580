package tenantstorage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"

	"go.miloapis.com/milo/pkg/tenancy"
)

// A project whose objects a quota limits has, on etcd, an object count in
// storage: its usage tally, which every replica of the server reads and
// moves in the transactions that create and delete the project's objects,
// so that two replicas cannot both store the last object the limit allows.
// Each replica deciding from counts of its own would let a project store
// as many times its limit as there are replicas.
//
// The tally's key names an epoch, chosen by the meter (it changes when the
// grants that set the limit change): a tally is kept right only while
// every replica meters the project, so a new epoch starts from a new count.

// usagePrefix is where usage tallies are kept under the storage prefix,
// one range per project (…/<storage id>/), which the project's purge
// deletes with its objects.
const usagePrefix = "_milo/quota-usage"

// usageResource is the pseudo-resource Prefixes records the usage tallies'
// prefix under: unmetered, so counts of a project's objects skip it.
var usageResource = schema.GroupResource{Group: "quota.miloapis.com", Resource: "-usage-tallies"}

// KeepUsageTallies records the usage tallies' key prefix among the
// resources' prefixes, so that a project's purge deletes its tallies.
func (p *Prefixes) KeepUsageTallies(storagePrefix string) {
	p.add(storagePrefix, usagePrefix, usageResource)
}

// UsageTallyKey is where the objects of the project with storage id
// projectID are counted in epoch, under the storage prefix.
func UsageTallyKey(projectID, epoch string) string {
	return usagePrefix + "/" + projectID + "/objects-" + epoch
}

// BytesTallyKey is where the bytes the objects of the project with storage
// id projectID take in storage are counted in epoch, beside its objects,
// where its bytes are limited.
func BytesTallyKey(projectID, epoch string) string {
	return usagePrefix + "/" + projectID + "/bytes-" + epoch
}

// deletesMark is the key, in a project's usage range, that every delete of
// a project whose usage is counted writes: a count being made meanwhile
// sees it move and counts again (deleted keys leave no revision a count
// could compare). A count deletes it.
const deletesMark = "deletes"

// Refused is a write refused because the project's limit cannot hold it.
type Refused struct{ Err error }

func (r Refused) Error() string { return r.Err.Error() }
func (r Refused) Unwrap() error { return r.Err }

// TalliedWrite is a MeteredWrite of a project whose objects are counted in
// a usage tally: its creates and deletes move the tally in their own
// transactions.
type TalliedWrite interface {
	MeteredWrite
	// ObjectsTally is the tally's key; "" when the project's objects are
	// not counted in storage.
	ObjectsTally() string
	// BytesTally is the key of the tally of the project's bytes, beside
	// its objects'; "" when its bytes are not counted in storage (not
	// limited).
	BytesTally() string
	// Guard is the guard of the tallies for one write adding objects and
	// bytes (either negative to free; bytes ignored where BytesTally is
	// ""): refusable says growth past a limit is refused (with a
	// Refused). Moved may count the project again, when a tally is gone
	// (another epoch's count replaced it).
	Guard(objects, bytes int64, refusable bool) TallyGuard
	// Learn tells the write what a tally (its key says which) holds at a
	// revision (after a delete moved it).
	Learn(now Tally)
	// Untallied says the write's resource is kept where the tally's
	// transactions do not reach (another etcd): its objects are charged
	// as Charge is told, not in the tally.
	Untallied()
}

// objectsTally returns w's tally key when w is a write of a project whose
// objects are counted in storage this store's transactions reach.
func (s *store) objectsTally(w MeteredWrite) (TalliedWrite, string) {
	tw, ok := w.(TalliedWrite)
	if !ok {
		return nil, ""
	}
	key := tw.ObjectsTally()
	if key == "" {
		return nil, ""
	}
	return tw, key
}

// CountUsage counts, directly in storage, the objects of the project with
// storage id projectID and writes the count into the tally at key (a
// UsageTallyKey), and, when bytesKey (a BytesTallyKey of the same epoch)
// is set, the bytes their values take into the tally at bytesKey; it
// deletes the project's tallies of other epochs. The write is on the
// condition that the tallies did not move and no object was created in the
// project's ranges since the count's revision (nor, when bytes are
// counted, updated), so a write stored meanwhile, by any replica, makes it
// count again. A delete made meanwhile without moving the tallies is
// counted, leaving them too high rather than too low. more are further
// resource prefixes (a project's own CRDs'). It returns the tallies as
// written (bytes: zero when not counted).
func CountUsage(ctx context.Context, kv clientv3.KV, prefixes *Prefixes, storagePrefix, projectID, key, bytesKey string, more ...string) (objects, bytes Tally, _ error) {
	if !tenancy.ValidProjectID(projectID) {
		return Tally{}, Tally{}, fmt.Errorf("usage: %q is not a project storage id", projectID)
	}
	ranges := prefixes.projectRanges(projectID, prefixes.unmeteredPrefixes(), more)
	base := path.Join("/", storagePrefix) + "/"
	own := base + usagePrefix + "/" + projectID + "/"
	tallies := []string{base + key}
	if bytesKey != "" {
		tallies = append(tallies, base+bytesKey)
	}
	for _, full := range tallies {
		if !strings.HasPrefix(full, own) || strings.Contains(strings.TrimPrefix(full, own), "/") {
			return Tally{}, Tally{}, fmt.Errorf("usage: %q is not a usage tally of project %s", strings.TrimPrefix(full, base), projectID)
		}
	}
	// The deletes' mark is read and compared with the tallies, not
	// written: a delete made after the count's read moves it, and fails
	// the count's write, which would otherwise count the deleted object.
	tallies = append(tallies, own+deletesMark)
	isTally := func(k string) bool { return slices.Contains(tallies, k) }
	for range maxTallyRounds {
		// One read of the tallies and of every range's count, at one
		// revision; then, for bytes, the values of the ranges that hold
		// any, at that revision.
		var revision, count, size int64
		was := map[string]int64{}
		var held []string
		for batch := range slices.Chunk(append(slices.Clone(tallies), ranges...), txnLimit) {
			ops := make([]clientv3.Op, 0, len(batch))
			for _, r := range batch {
				if isTally(r) {
					ops = append(ops, clientv3.OpGet(r))
					continue
				}
				opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
				if revision != 0 {
					opts = append(opts, clientv3.WithRev(revision))
				}
				ops = append(ops, clientv3.OpGet(r, opts...))
			}
			resp, err := kv.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				return Tally{}, Tally{}, fmt.Errorf("counting the objects of project %s: %w", projectID, err)
			}
			if revision == 0 {
				revision = resp.Header.Revision
			}
			for i, r := range resp.Responses {
				rr := r.GetResponseRange()
				if isTally(batch[i]) {
					if len(rr.Kvs) > 0 {
						was[batch[i]] = rr.Kvs[0].ModRevision
					}
					continue
				}
				count += rr.Count
				if rr.Count > 0 {
					held = append(held, batch[i])
				}
			}
		}
		if bytesKey != "" {
			for _, r := range held {
				n, err := valueBytes(ctx, kv, r, revision)
				if err != nil {
					return Tally{}, Tally{}, fmt.Errorf("counting the bytes of project %s: %w", projectID, err)
				}
				size += n
			}
		}
		// The write, unless an object was created since (or, for bytes,
		// updated; an update does not change a count of objects, and a
		// delete leaves it too high, not too low) or a tally moved. etcd
		// bounds the compares of one transaction: the ranges past what
		// the write can compare are compared just before it, in
		// transactions of their own, which leaves a write in those ranges
		// between the two uncounted (a project with more resources than
		// etcd compares at once).
		unchanged := func(rs []string) []clientv3.Cmp {
			var ifs []clientv3.Cmp
			for _, r := range rs {
				target := clientv3.CreateRevision(r)
				if bytesKey != "" {
					target = clientv3.ModRevision(r)
				}
				ifs = append(ifs, clientv3.Compare(target, "<", revision+1).WithPrefix())
			}
			return ifs
		}
		room := txnLimit - len(tallies)
		first, rest := ranges[:min(len(ranges), room)], ranges[min(len(ranges), room):]
		moved := false
		for batch := range slices.Chunk(rest, txnLimit) {
			resp, err := kv.Txn(ctx).If(unchanged(batch)...).Commit()
			if err != nil {
				return Tally{}, Tally{}, fmt.Errorf("counting the objects of project %s: %w", projectID, err)
			}
			moved = moved || !resp.Succeeded
		}
		if moved {
			continue
		}
		var ifs []clientv3.Cmp
		for _, full := range tallies {
			ifs = append(ifs, clientv3.Compare(clientv3.ModRevision(full), "=", was[full]))
		}
		ifs = append(ifs, unchanged(first)...)
		values := map[string]int64{base + key: count}
		if bytesKey != "" {
			values[base+bytesKey] = size
		}
		resp, err := kv.Txn(ctx).If(ifs...).Then(replaceTallies(own, values)...).Commit()
		if err != nil {
			return Tally{}, Tally{}, fmt.Errorf("writing the object count of project %s: %w", projectID, err)
		}
		if resp.Succeeded {
			objects = Tally{Key: key, Revision: resp.Header.Revision, Value: count, Keep: true}
			if bytesKey != "" {
				bytes = Tally{Key: bytesKey, Revision: resp.Header.Revision, Value: size, Keep: true}
			}
			return objects, bytes, nil
		}
	}
	return Tally{}, Tally{}, apierrors.NewTooManyRequests(fmt.Sprintf("the objects of project %s changed at each count: retry", projectID), 1)
}

// replaceTallies are the writes that leave values, and nothing else, in
// the tally range own: a put of each and deletes of the gaps around them
// (etcd refuses a delete over a key the same transaction puts).
func replaceTallies(own string, values map[string]int64) []clientv3.Op {
	var ops []clientv3.Op
	from := own
	for _, k := range slices.Sorted(maps.Keys(values)) {
		ops = append(ops, clientv3.OpDelete(from, clientv3.WithRange(k)), clientv3.OpPut(k, strconv.FormatInt(values[k], 10)))
		from = k + "\x00"
	}
	return append(ops, clientv3.OpDelete(from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(own))))
}

// valueBytes sums the sizes of the values stored under prefix at revision,
// read a page at a time.
func valueBytes(ctx context.Context, kv clientv3.KV, prefix string, revision int64) (int64, error) {
	var sum int64
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := kv.Get(ctx, from, clientv3.WithRange(end), clientv3.WithRev(revision), clientv3.WithLimit(recountPage))
		if err != nil {
			return 0, err
		}
		for _, item := range resp.Kvs {
			sum += int64(len(item.Value))
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return sum, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// txnLimit stays below etcd's default limit of operations (and of
// compares) per transaction, 128.
const txnLimit = 100

// meteredDelete deletes an object of a project whose objects tw's tally
// counts, and takes one from the tally (and its bytes from the bytes
// tally, where they are counted) in the same transaction.
func (s *store) meteredDelete(ctx context.Context, tw TalliedWrite, tally, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc) error {
	mark := path.Dir(tally) + "/" + deletesMark
	return s.talliedDelete(ctx, key, out, preconditions, validateDeletion, func(_ runtime.Object, size int64) ([]Tally, string) {
		held := []Tally{{Key: tally, Add: 1, Keep: true}}
		if b := tw.BytesTally(); b != "" {
			// The bytes as stored, which a create or update added: not
			// the object encoded again, which defaults applied on reading
			// it may have grown.
			held = append(held, Tally{Key: b, Add: size, Keep: true})
		}
		return held, mark
	}, func(now []Tally) {
		for _, t := range now {
			tw.Learn(t)
		}
	})
}

// asRefusal makes a guard's refusal the request's answer.
func (s *store) asRefusal(key string, err error) error {
	var r Refused
	if errors.As(err, &r) {
		return s.refused(key, r.Err)
	}
	return err
}

// applied is t as a transaction of tallyOps committed at revision left it
// (its Add applied, then cleared).
func applied(t Tally, revision int64) Tally {
	switch v := t.Value + t.Add; {
	case t.Keep && t.Revision == 0 && t.Add <= 0:
	case v > 0 || (t.Keep && v == 0):
		t.Revision, t.Value = revision, v
	default:
		t.Revision, t.Value = 0, 0
	}
	t.Add = 0
	return t
}

// bothGuards is a guard of a's tallies and b's, either nil.
func bothGuards(a, b TallyGuard) TallyGuard {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return &pairedGuards{a: a, b: b}
}

// pairedGuards keeps two guards' tallies in one transaction: a create's
// quota claims' and its project's usage.
type pairedGuards struct {
	a, b TallyGuard
	// n is how many tallies a expected last.
	n int
}

func (p *pairedGuards) Keys() []string { return append(p.a.Keys(), p.b.Keys()...) }

func (p *pairedGuards) Expect(ahead []int64) []Tally {
	var aheadA, aheadB []int64
	if ahead != nil {
		n := len(p.a.Keys())
		aheadA, aheadB = ahead[:n], ahead[n:]
	}
	a := p.a.Expect(aheadA)
	p.n = len(a)
	return append(a, p.b.Expect(aheadB)...)
}

func (p *pairedGuards) Moved(now []Tally) error {
	if err := p.a.Moved(now[:p.n]); err != nil {
		return err
	}
	return p.b.Moved(now[p.n:])
}

func (p *pairedGuards) Stored(now []Tally) {
	p.a.Stored(now[:p.n])
	p.b.Stored(now[p.n:])
}

// DropUsage deletes every project's usage tally: each is counted again at
// its project's next create. It is for objects removed behind the storage
// layer's back (a CRD's instances purged in storage).
func DropUsage(ctx context.Context, kv clientv3.KV, storagePrefix string) error {
	_, err := kv.Delete(ctx, path.Join("/", storagePrefix)+"/"+usagePrefix+"/", clientv3.WithPrefix())
	return err
}

// FollowUsage watches every project's usage tallies in storage (one watch
// for all of them) until ctx ends, telling seen what each tally (of
// objects or of bytes: its key says) holds whenever a replica writes it:
// a server learns of other replicas' writes there, so the buckets it
// shows count them too.
func FollowUsage(ctx context.Context, w clientv3.Watcher, storagePrefix string, seen func(projectID, epoch string, now Tally)) {
	base := path.Join("/", storagePrefix) + "/"
	prefix := base + usagePrefix + "/"
	for ctx.Err() == nil {
		for resp := range w.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix()) {
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue // an epoch replaced, or the project purged
				}
				id, rest, ok := strings.Cut(strings.TrimPrefix(string(ev.Kv.Key), prefix), "/")
				epoch, isCount := strings.CutPrefix(rest, "objects-")
				if !isCount {
					epoch, isCount = strings.CutPrefix(rest, "bytes-")
				}
				v, err := strconv.ParseInt(string(ev.Kv.Value), 10, 64)
				if !ok || !isCount || err != nil { // the deletes' mark among others
					continue
				}
				seen(id, epoch, Tally{Key: strings.TrimPrefix(string(ev.Kv.Key), base), Revision: ev.Kv.ModRevision, Value: v, Keep: true})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // the watch ended (no leader): again
		}
	}
}
