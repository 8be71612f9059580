// Package keyranges is Milo's work on ranges of storage keys, beside the API
// server's storage of objects: counting what a project stores, purging a
// deleted project's or CRD's keys, rewriting keys when the layout changes.
//
// Two implementations speak the etcd API: Etcd, which batches a range
// operation over many prefixes into one transaction (so a purge is one atomic
// step), and Kine, for kine's SQL backends, whose etcd API accepts only the
// single-key transactions the API server itself sends (and whose range
// deletes ignore their range end): there a purge is a loop deleting one key
// at a time, idempotent and safe to run again after an interruption.
package keyranges

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Store works on ranges of keys. Prefixes end in "/" where a prefix must not
// be a prefix of another's keys; Store takes them as they are.
type Store interface {
	// Count counts the keys under every prefix, in all.
	Count(ctx context.Context, prefixes ...string) (int64, error)
	// CountEach counts the keys under each prefix: the i-th count is
	// prefixes[i]'s. revision is one the counts all hold at or after: a key
	// written later than it may or may not be counted (0: none known).
	CountEach(ctx context.Context, prefixes ...string) (counts []int64, revision int64, err error)
	// Measure counts the keys under every prefix and sums their values' lengths.
	Measure(ctx context.Context, prefixes ...string) (keys, bytes int64, err error)
	// Exists reports whether key is stored.
	Exists(ctx context.Context, key string) (bool, error)
	// DeletePrefixes deletes every key under every prefix and reports how many it deleted.
	DeletePrefixes(ctx context.Context, prefixes ...string) (int64, error)
	// DeletePrefixesUnchanged is DeletePrefixes for ranges none of whose
	// keys was written after revision since: each transaction deletes its
	// ranges only if so, and the first that finds a change ends it,
	// reporting unchanged false (the ranges of earlier transactions are
	// deleted). Only etcd compares ranges: kine answers ErrRangeCompare.
	DeletePrefixesUnchanged(ctx context.Context, since int64, prefixes ...string) (deleted int64, unchanged bool, err error)
	// Delete deletes one key and reports whether it was stored.
	Delete(ctx context.Context, key string) (bool, error)
	// List returns every key and value under prefix.
	List(ctx context.Context, prefix string) ([]KV, error)
	// KeysBetween calls f with every key from start (included) to end
	// (excluded), in pages, values unread. On etcd each page costs a visit
	// of every key from its start to end (etcd counts them for the reply),
	// so a wide range costs the square of its keys over the page size:
	// callers split a wide range into narrow ones.
	KeysBetween(ctx context.Context, start, end string, f func(key string) error) error
	// KeyRevisions calls f with every key from start (included) to end
	// (excluded) as stored at revision, and the revision it was last
	// written at, in key order, pageSize keys a page. The answer leaves
	// values out, but etcd reads and decodes them, and each page costs a
	// visit of every key from its start to end, as KeysBetween's do:
	// callers split a wide range into narrow ones. A revision compacted
	// away is an error.
	KeyRevisions(ctx context.Context, start, end string, revision, pageSize int64, f func(key string, written int64) error) error
	// Get returns key's value, if it is stored.
	Get(ctx context.Context, key string) (KV, bool, error)
	// Put writes key unconditionally.
	Put(ctx context.Context, key string, value []byte) error
	// Create writes key if it is not stored, and reports whether it did.
	Create(ctx context.Context, key string, value []byte) (bool, error)
	// CompareAndPut writes key if its revision is still revision; if not,
	// it returns what is stored now (found false: nothing).
	CompareAndPut(ctx context.Context, key string, value []byte, revision int64) (written bool, now KV, found bool, err error)
}

// KV is a stored key, its value and the revision it was last written at.
type KV struct {
	Key      string
	Value    []byte
	Revision int64
}

// page is how many keys a range is read in at a time.
const page = 500

// maxStalled is how many rounds of a kine purge may delete nothing.
const maxStalled = 3

// txnOps stays below etcd's default --max-txn-ops (128).
const txnOps = 100

// Etcd returns the Store of an etcd cluster.
func Etcd(client *clientv3.Client) Store { return etcdStore{common{client}} }

// Kine returns the Store of a kine endpoint.
func Kine(client *clientv3.Client) Store { return kineStore{common{client}} }

// common is what both implementations do the same way: single-key reads
// and writes and paged range reads, which kine serves as etcd does.
type common struct{ client *clientv3.Client }

func (c common) Exists(ctx context.Context, key string) (bool, error) {
	resp, err := c.client.Get(ctx, key, clientv3.WithKeysOnly())
	if err != nil {
		return false, fmt.Errorf("looking up %s: %w", key, err)
	}
	return len(resp.Kvs) > 0, nil
}

func (c common) Get(ctx context.Context, key string) (KV, bool, error) {
	resp, err := c.client.Get(ctx, key)
	if err != nil {
		return KV{}, false, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, false, nil
	}
	kv := resp.Kvs[0]
	return KV{Key: string(kv.Key), Value: kv.Value, Revision: kv.ModRevision}, true, nil
}

// Put writes with a compare-and-put on the revision read (0: absent), not
// a plain put: kine's plain put of an existing key writes nothing unless
// that key was the last one written.
func (c common) Put(ctx context.Context, key string, value []byte) error {
	kv, _, err := c.Get(ctx, key)
	for err == nil {
		var written, found bool
		written, kv, found, err = c.CompareAndPut(ctx, key, value, kv.Revision)
		if written {
			return nil
		}
		if !found {
			kv = KV{}
		}
	}
	return err
}

func (c common) Create(ctx context.Context, key string, value []byte) (bool, error) {
	txn, err := c.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(value))).Commit()
	if err != nil {
		return false, fmt.Errorf("creating %s: %w", key, err)
	}
	return txn.Succeeded, nil
}

func (c common) CompareAndPut(ctx context.Context, key string, value []byte, revision int64) (bool, KV, bool, error) {
	txn, err := c.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", revision)).
		Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, KV{}, false, fmt.Errorf("writing %s: %w", key, err)
	}
	if txn.Succeeded {
		return true, KV{}, false, nil
	}
	kvs := txn.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return false, KV{}, false, nil
	}
	return false, KV{Key: string(kvs[0].Key), Value: kvs[0].Value, Revision: kvs[0].ModRevision}, true, nil
}

// each calls f with every key under prefix, a page at a time, in key
// order; keysOnly leaves values out.
func (c common) each(ctx context.Context, prefix string, keysOnly bool, f func(KV) error) error {
	return c.between(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), keysOnly, f)
}

// between calls f with every key from start to end, as each does.
func (c common) between(ctx context.Context, start, end string, keysOnly bool, f func(KV) error) error {
	opts := []clientv3.OpOption{clientv3.WithLimit(page)}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	return c.pages(ctx, start, end, opts, start, f)
}

func (c common) KeyRevisions(ctx context.Context, start, end string, revision, pageSize int64, f func(key string, written int64) error) error {
	return c.keyRevisions(ctx, start, end, revision, pageSize, f)
}

func (c common) keyRevisions(ctx context.Context, start, end string, revision, pageSize int64, f func(key string, written int64) error, opts ...clientv3.OpOption) error {
	opts = append(opts, clientv3.WithLimit(pageSize), clientv3.WithKeysOnly(), clientv3.WithRev(revision))
	return c.pages(ctx, start, end, opts, fmt.Sprintf("%s to %s at revision %d", start, end, revision),
		func(kv KV) error { return f(kv.Key, kv.Revision) })
}

// pages reads the keys from start to end a page at a time (opts limit
// it), each page going on after the last key of the one before, and calls
// f with each. An error of f is returned as it is; one of storage names
// what was read.
func (c common) pages(ctx context.Context, start, end string, opts []clientv3.OpOption, what string, f func(KV) error) error {
	opts = append(opts, clientv3.WithRange(end))
	for key := start; ; {
		resp, err := c.client.Get(ctx, key, opts...)
		if err != nil {
			return fmt.Errorf("reading %s: %w", what, err)
		}
		for _, kv := range resp.Kvs {
			if err := f(KV{Key: string(kv.Key), Value: kv.Value, Revision: kv.ModRevision}); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (c common) List(ctx context.Context, prefix string) ([]KV, error) {
	var out []KV
	err := c.each(ctx, prefix, false, func(kv KV) error {
		out = append(out, kv)
		return nil
	})
	return out, err
}

func (c common) KeysBetween(ctx context.Context, start, end string, f func(string) error) error {
	return c.between(ctx, start, end, true, func(kv KV) error { return f(kv.Key) })
}

func (c common) Measure(ctx context.Context, prefixes ...string) (keys, bytes int64, err error) {
	for _, prefix := range prefixes {
		if err := c.each(ctx, prefix, false, func(kv KV) error {
			keys++
			bytes += int64(len(kv.Value))
			return nil
		}); err != nil {
			return 0, 0, err
		}
	}
	return keys, bytes, nil
}

// etcdStore batches range operations into transactions.
type etcdStore struct{ common }

// KeyRevisions reads at revision from the member the client is connected
// to, without the round of consensus a linearizable read waits for on
// every page: every member holds the same keys at a revision it has
// applied. A member that has not applied it yet answers that the revision
// is in the future; the rest is then read linearizably, which waits until
// the member has. (kine refuses serializable reads: its store reads as
// common does.) Revision 0, the latest, is read linearizably.
func (s etcdStore) KeyRevisions(ctx context.Context, start, end string, revision, pageSize int64, f func(key string, written int64) error) error {
	if revision <= 0 {
		return s.keyRevisions(ctx, start, end, revision, pageSize, f)
	}
	// The client spreads its requests over the cluster's members: a page
	// after the first may reach one behind. The read goes on after the
	// last key f was given.
	from := start
	given := func(key string, written int64) error {
		from = key + "\x00"
		return f(key, written)
	}
	err := s.keyRevisions(ctx, start, end, revision, pageSize, given, clientv3.WithSerializable())
	if errors.Is(err, rpctypes.ErrFutureRev) {
		err = s.keyRevisions(ctx, from, end, revision, pageSize, given)
	}
	return err
}

func (s etcdStore) Count(ctx context.Context, prefixes ...string) (int64, error) {
	counts, _, err := s.CountEach(ctx, prefixes...)
	return sum(counts), err
}

// CountEach counts in as few transactions as Count: one range read per
// prefix, values unread, in one round trip for at most txnOps prefixes. The
// revision is the first transaction's: every later one reads at or after it.
func (s etcdStore) CountEach(ctx context.Context, prefixes ...string) ([]int64, int64, error) {
	counts := make([]int64, 0, len(prefixes))
	var revision int64
	for batch := range slices.Chunk(prefixes, txnOps) {
		ops := make([]clientv3.Op, 0, len(batch))
		for _, prefix := range batch {
			ops = append(ops, clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()))
		}
		resp, err := s.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, 0, fmt.Errorf("counting keys: %w", err)
		}
		if len(resp.Responses) != len(batch) {
			return nil, 0, fmt.Errorf("counting keys: %d answers to %d ranges", len(resp.Responses), len(batch))
		}
		if revision == 0 {
			revision = resp.Header.GetRevision()
		}
		for _, r := range resp.Responses {
			counts = append(counts, r.GetResponseRange().GetCount())
		}
	}
	return counts, revision, nil
}

func sum(counts []int64) int64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
}

// DeletePrefixes deletes the ranges in as few transactions as etcd's limit
// on operations per transaction allows: one, for fewer than txnOps
// prefixes, so the deletion is one atomic step, one consensus round and
// one disk sync.
func (s etcdStore) DeletePrefixes(ctx context.Context, prefixes ...string) (int64, error) {
	deleted, _, err := s.DeletePrefixesUnchanged(ctx, 0, prefixes...)
	return deleted, err
}

// DeletePrefixesUnchanged is DeletePrefixes, each transaction, when since
// is not 0, on the condition that no key of its ranges was written after
// since (a range without keys passes).
func (s etcdStore) DeletePrefixesUnchanged(ctx context.Context, since int64, prefixes ...string) (int64, bool, error) {
	var deleted int64
	for batch := range slices.Chunk(prefixes, txnOps) {
		var ifs []clientv3.Cmp
		ops := make([]clientv3.Op, 0, len(batch))
		for _, prefix := range batch {
			if since != 0 {
				ifs = append(ifs, clientv3.Compare(clientv3.ModRevision(prefix), "<", since+1).WithPrefix())
			}
			ops = append(ops, clientv3.OpDelete(prefix, clientv3.WithPrefix()))
		}
		resp, err := s.client.Txn(ctx).If(ifs...).Then(ops...).Commit()
		if err != nil {
			return deleted, false, fmt.Errorf("deleting key ranges: %w", err)
		}
		if !resp.Succeeded {
			return deleted, false, nil
		}
		for _, r := range resp.Responses {
			if d := r.GetResponseDeleteRange(); d != nil {
				deleted += d.Deleted
			}
		}
	}
	return deleted, true, nil
}

// ComparesRanges reports whether s can delete key ranges on the condition
// that they are unchanged (etcd can; kine answers ErrRangeCompare).
func ComparesRanges(s Store) bool {
	_, kine := s.(kineStore)
	return !kine
}

// ErrRangeCompare is kine's answer to a deletion conditional on ranges.
var ErrRangeCompare = errors.New("this storage cannot delete key ranges on the condition that they are unchanged")

// DeletePrefixesUnchanged is not possible on kine, which compares one key
// per transaction.
func (kineStore) DeletePrefixesUnchanged(context.Context, int64, ...string) (int64, bool, error) {
	return 0, false, ErrRangeCompare
}

// kineStore does one key or one range read per request.
type kineStore struct{ common }

func (s kineStore) Count(ctx context.Context, prefixes ...string) (int64, error) {
	counts, _, err := s.CountEach(ctx, prefixes...)
	return sum(counts), err
}

// CountEach reads one range per request: kine takes no transaction of them.
// The revision is the first read's.
func (s kineStore) CountEach(ctx context.Context, prefixes ...string) ([]int64, int64, error) {
	counts := make([]int64, 0, len(prefixes))
	var revision int64
	for _, prefix := range prefixes {
		resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, 0, fmt.Errorf("counting %s: %w", prefix, err)
		}
		if revision == 0 {
			revision = resp.Header.GetRevision()
		}
		counts = append(counts, resp.Count)
	}
	return counts, revision, nil
}

func (s etcdStore) Delete(ctx context.Context, key string) (bool, error) {
	resp, err := s.client.Delete(ctx, key)
	if err != nil {
		return false, fmt.Errorf("deleting %s: %w", key, err)
	}
	return resp.Deleted > 0, nil
}

// Delete deletes in the one transaction shape kine takes for a delete (a get
// and a delete of the same key).
func (s kineStore) Delete(ctx context.Context, key string) (bool, error) {
	resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, fmt.Errorf("deleting %s: %w", key, err)
	}
	if resp.Succeeded && len(resp.Responses) > 0 {
		if d := resp.Responses[len(resp.Responses)-1].GetResponseDeleteRange(); d != nil {
			return d.Deleted > 0, nil
		}
	}
	return false, nil
}

// DeletePrefixes lists each range's keys and deletes them one by one (the
// delete kine accepts: a read and a delete of one key), until a listing
// finds none left: keys written meanwhile go too, and a run interrupted
// part way is finished by the next.
func (s kineStore) DeletePrefixes(ctx context.Context, prefixes ...string) (int64, error) {
	var deleted int64
	for _, prefix := range prefixes {
		// A round that deletes nothing while as many keys are left (kine
		// answers a delete it could not write as a failed comparison, not
		// an error) makes no progress: a few of them in a row end it.
		stalled, left, round := 0, -1, int64(0)
		for {
			var keys []string
			if err := s.each(ctx, prefix, true, func(kv KV) error {
				keys = append(keys, kv.Key)
				return nil
			}); err != nil {
				return deleted, err
			}
			if len(keys) == 0 {
				break
			}
			if left >= 0 && round == 0 && len(keys) >= left {
				if stalled++; stalled >= maxStalled {
					return deleted, fmt.Errorf("deleting %s: %d keys left after %d rounds that deleted none", prefix, len(keys), stalled)
				}
			} else {
				stalled = 0
			}
			left, round = len(keys), 0
			for _, key := range keys {
				resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpDelete(key)).Commit()
				if err != nil {
					return deleted, fmt.Errorf("deleting %s: %w", key, err)
				}
				if resp.Succeeded && len(resp.Responses) > 0 {
					if d := resp.Responses[len(resp.Responses)-1].GetResponseDeleteRange(); d != nil {
						deleted += d.Deleted
						round += d.Deleted
					}
				}
			}
		}
	}
	return deleted, nil
}
