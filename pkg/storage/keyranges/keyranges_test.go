package keyranges_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/storage/sqlstorage"
	"go.miloapis.com/milo/test/framework"
)

// backend is one real storage speaking the etcd API.
type backend struct {
	name   string
	client *clientv3.Client
	stores map[string]keyranges.Store
}

// backends starts every storage Milo runs on: an embedded etcd (with both
// stores: kine's works on etcd too), and kine on SQLite and on the
// machine's PostgreSQL and MySQL (MariaDB here), each in a database of this
// run's own, dropped after.
func backends(t *testing.T) []backend {
	t.Helper()
	dir := t.TempDir()
	var out []backend

	etcd, err := framework.StartEtcd(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	ec := etcd.Client
	out = append(out, backend{"etcd", ec, map[string]keyranges.Store{"etcd": keyranges.Etcd(ec), "kine": keyranges.Kine(ec)}})

	kine := func(name, endpoint string) {
		s, err := sqlstorage.Start(context.Background(), sqlstorage.Config{Endpoint: endpoint, Socket: filepath.Join(dir, name+".sock")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c := client(t, clientv3.Config{Endpoints: []string{s.URL()}})
		out = append(out, backend{name, c, map[string]keyranges.Store{"kine": keyranges.Kine(c)}})
	}
	kine("sqlite", "sqlite://"+filepath.Join(dir, "state.db"))
	for _, backend := range framework.SQLBackends {
		if db := sqlDatabase(t, backend); db != "" {
			kine(backend, db)
		}
	}
	return out
}

func client(t *testing.T, cfg clientv3.Config) *clientv3.Client {
	t.Helper()
	cfg.DialTimeout = 10 * time.Second
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sqlDatabase names a database of this test run's own on the machine's
// server of backend (kine creates it), dropped when the test ends; "" when
// no server answers, which fails the test under CI.
func sqlDatabase(t *testing.T, backend string) string {
	t.Helper()
	pg, err := framework.NewSQLDatabase(backend, "milo_keyranges")
	if errors.Is(err, framework.ErrNoSQLServer) && !framework.MustHaveSQL() {
		t.Logf("!!! SKIPPING the %s backend: %v", backend, err)
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Drop)
	return pg.URL
}

// TestKeyRanges runs every store on every backend: counting, measuring,
// listing, compare-and-put, and deleting ranges — more keys than a page,
// beside a range sharing a prefix, twice, and by two purgers at once.
func TestKeyRanges(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		for name, s := range b.stores {
			t.Run(b.name+"/"+name, func(t *testing.T) {
				root := "/" + b.name + "-" + name + "/"
				put := func(key string, size int) {
					t.Helper()
					if err := s.Put(ctx, root+key, []byte(strings.Repeat("v", size))); err != nil {
						t.Fatal(err)
					}
				}
				const many = 1100 // more than two pages
				for i := range many {
					put(fmt.Sprintf("a/%05d", i), 10)
				}
				put("ab/x", 7) // "a/" is not a prefix of it
				put("b/1", 100)
				put("b/2", 200)

				// Keys compare as bytes, as on etcd: keys differing in case
				// only are two keys, and "C/" < "D/" < "c/" (MySQL's
				// default collation of kine's keys would make C/ and c/ one
				// range).
				put("C/x", 1)
				put("c/x", 2)
				if n, err := s.Count(ctx, root+"C/"); err != nil || n != 1 {
					t.Fatalf("count C/ beside c/: %d %v", n, err)
				}
				if kv, ok, err := s.Get(ctx, root+"c/x"); err != nil || !ok || string(kv.Value) != "vv" {
					t.Fatalf("get c/x beside C/x: %q %v %v", kv.Value, ok, err)
				}
				if n, err := s.DeletePrefixes(ctx, root+"C/"); err != nil || n != 1 {
					t.Fatalf("delete C/: %d %v", n, err)
				}
				if n, err := s.Count(ctx, root+"c/"); err != nil || n != 1 {
					t.Fatalf("c/ after deleting C/: %d %v", n, err)
				}
				put("c/x ", 3) // a trailing space makes another key
				if kv, ok, err := s.Get(ctx, root+"c/x"); err != nil || !ok || string(kv.Value) != "vv" {
					t.Fatalf("get c/x beside \"c/x \": %q %v %v", kv.Value, ok, err)
				}
				// A paged list goes on after the last key of a page: keys
				// continuing it with a byte below '#' are not skipped.
				const chain = 520 // more than a page
				for i := range chain {
					put("d/k"+strings.Repeat("!", i), 1)
				}
				if list, err := s.List(ctx, root+"d/"); err != nil || len(list) != chain {
					t.Fatalf("list of %d keys each continuing the one before with '!': %d %v", chain, len(list), err)
				}
				if _, err := s.DeletePrefixes(ctx, root+"c/", root+"d/"); err != nil {
					t.Fatal(err)
				}

				if n, err := s.Count(ctx, root+"a/"); err != nil || n != many {
					t.Fatalf("count a/: %d %v", n, err)
				}
				if n, err := s.Count(ctx, root+"a/", root+"b/", root+"none/"); err != nil || n != many+2 {
					t.Fatalf("count a/, b/, none/: %d %v", n, err)
				}
				counts, counted, err := s.CountEach(ctx, root+"b/", root+"none/", root+"a/", root+"ab/")
				if err != nil || !slices.Equal(counts, []int64{2, 0, many, 1}) {
					t.Fatalf("count each of b/, none/, a/, ab/: %v %v", counts, err)
				}
				// The counts' revision is at or after every write before them.
				if b2, _, _ := s.Get(ctx, root+"b/2"); counted < b2.Revision {
					t.Fatalf("counted at revision %d, before b/2 was written at %d", counted, b2.Revision)
				}
				// More ranges than one transaction takes: the counts keep their order.
				var ranges []string
				for i := range 250 {
					ranges = append(ranges, root+fmt.Sprintf("a/%05d", i*4))
				}
				if counts, _, err := s.CountEach(ctx, ranges...); err != nil || len(counts) != 250 || slices.ContainsFunc(counts, func(n int64) bool { return n != 1 }) {
					t.Fatalf("count each of 250 keys: %v %v", counts, err)
				}
				if counts, _, err := s.CountEach(ctx); err != nil || len(counts) != 0 {
					t.Fatalf("count each of nothing: %v %v", counts, err)
				}
				if k, bytes, err := s.Measure(ctx, root+"b/", root+"ab/"); err != nil || k != 3 || bytes != 307 {
					t.Fatalf("measure b/, ab/: %d keys, %d bytes, %v", k, bytes, err)
				}
				if ok, err := s.Exists(ctx, root+"b/1"); err != nil || !ok {
					t.Fatalf("b/1 exists: %v %v", ok, err)
				}
				if ok, err := s.Exists(ctx, root+"b/3"); err != nil || ok {
					t.Fatalf("b/3 exists: %v %v", ok, err)
				}
				list, err := s.List(ctx, root+"a/")
				if err != nil || len(list) != many || list[0].Key != root+"a/00000" || list[many-1].Key != root+"a/01099" {
					t.Fatalf("list a/: %d %v", len(list), err)
				}

				// Keys and revisions as stored at a revision, whatever
				// was written after it: a/00005 rewritten, a/00006
				// deleted, a/zz created. The revision is the store's
				// newest (a/00000 written last): kine keeps only its
				// last thousand.
				put("a/00000", 10)
				list, err = s.List(ctx, root+"a/")
				if err != nil {
					t.Fatal(err)
				}
				var before int64
				for _, kv := range list {
					before = max(before, kv.Revision)
				}
				put("a/00005", 3)
				if _, err := s.Delete(ctx, root+"a/00006"); err != nil {
					t.Fatal(err)
				}
				put("a/zz", 1)
				type keyRevision struct {
					key     string
					written int64
				}
				var seen, then []keyRevision
				for _, kv := range list {
					then = append(then, keyRevision{kv.Key, kv.Revision})
				}
				collect := func(k string, written int64) error {
					seen = append(seen, keyRevision{k, written})
					return nil
				}
				if err := s.KeyRevisions(ctx, root+"a/", root+"a0", before, 300, collect); err != nil {
					t.Fatalf("keys of a/ at revision %d: %v", before, err)
				}
				if !slices.Equal(seen, then) {
					t.Fatalf("keys of a/ at revision %d, in pages of 300: %d keys, not the %d listed then", before, len(seen), many)
				}
				seen = nil
				if err := s.KeyRevisions(ctx, root+"a/", root+"a0", 0, 300, collect); err != nil || len(seen) != many ||
					seen[5].written <= before || seen[6].key != root+"a/00007" || seen[many-1].key != root+"a/zz" {
					t.Fatalf("keys of a/ now: %d %v", len(seen), err)
				}
				seen = nil
				if err := s.KeyRevisions(ctx, root+"a/00100", root+"a/00700", before, 300, collect); err != nil || len(seen) != 600 ||
					seen[0] != then[100] || seen[599] != then[699] {
					t.Fatalf("keys of a/ from 00100 to 00700 at revision %d: %d %v", before, len(seen), err)
				}
				put("a/00006", 10)
				if _, err := s.Delete(ctx, root+"a/zz"); err != nil {
					t.Fatal(err)
				}

				var keys []string
				if err := s.KeysBetween(ctx, root+"a/", root+"a0", func(k string) error { keys = append(keys, k); return nil }); err != nil ||
					len(keys) != many || keys[0] != root+"a/00000" || keys[many-1] != root+"a/01099" {
					t.Fatalf("keys of a/: %d %v", len(keys), err)
				}
				keys = nil
				if err := s.KeysBetween(ctx, root+"a/00100", root+"a/00700", func(k string) error { keys = append(keys, k); return nil }); err != nil ||
					len(keys) != 600 || keys[0] != root+"a/00100" || keys[599] != root+"a/00699" {
					t.Fatalf("keys of a/00100 to a/00700: %d %v", len(keys), err)
				}

				if created, err := s.Create(ctx, root+"c/1", []byte("first")); err != nil || !created {
					t.Fatalf("creating c/1: %v %v", created, err)
				}
				if created, err := s.Create(ctx, root+"c/1", []byte("second")); err != nil || created {
					t.Fatalf("creating c/1 again: %v %v", created, err)
				}
				if kv, _, _ := s.Get(ctx, root+"c/1"); string(kv.Value) != "first" {
					t.Fatalf("c/1 is %q after a second create", kv.Value)
				}
				kv, found, err := s.Get(ctx, root+"b/1")
				if err != nil || !found {
					t.Fatal(found, err)
				}
				put("b/1", 1) // kv is stale now
				written, now, found, err := s.CompareAndPut(ctx, root+"b/1", []byte("stale"), kv.Revision)
				if err != nil || written || !found || string(now.Value) != "v" {
					t.Fatalf("compare-and-put at a stale revision: %v %q %v %v", written, now.Value, found, err)
				}
				if written, _, _, err := s.CompareAndPut(ctx, root+"b/1", []byte("fresh"), now.Revision); err != nil || !written {
					t.Fatalf("compare-and-put at the current revision: %v %v", written, err)
				}
				if kv, _, _ := s.Get(ctx, root+"b/1"); string(kv.Value) != "fresh" {
					t.Fatalf("b/1 is %q", kv.Value)
				}

				// A purge on the condition that nothing changed since a
				// revision: refused once a key of its ranges is newer.
				put("d/1", 1)
				put("d/2", 1)
				first, _, _ := s.Get(ctx, root+"d/1")
				last, _, _ := s.Get(ctx, root+"d/2")
				n, unchanged, err := s.DeletePrefixesUnchanged(ctx, first.Revision, root+"d/", root+"none/")
				if name == "kine" {
					if !errors.Is(err, keyranges.ErrRangeCompare) {
						t.Fatalf("a conditional purge on kine: %v", err)
					}
					if _, err := s.DeletePrefixes(ctx, root+"d/"); err != nil {
						t.Fatal(err)
					}
				} else {
					if err != nil || unchanged || n != 0 {
						t.Fatalf("a purge since before d/2 was written: %d %v %v", n, unchanged, err)
					}
					if c, _ := s.Count(ctx, root+"d/"); c != 2 {
						t.Fatalf("a refused purge left %d keys of 2", c)
					}
					if n, unchanged, err := s.DeletePrefixesUnchanged(ctx, last.Revision, root+"d/", root+"none/"); err != nil || !unchanged || n != 2 {
						t.Fatalf("a purge since the last write: %d %v %v", n, unchanged, err)
					}
					// A range counted empty, then written: a purge since
					// the count's revision sees the write.
					put("e/1", 1)
					counts, counted, err := s.CountEach(ctx, root+"e/", root+"f/")
					if err != nil || !slices.Equal(counts, []int64{1, 0}) {
						t.Fatalf("count each of e/, f/: %v %v", counts, err)
					}
					put("f/1", 1)
					if n, unchanged, err := s.DeletePrefixesUnchanged(ctx, counted, root+"e/", root+"f/"); err != nil || unchanged || n != 0 {
						t.Fatalf("a purge since a count that found f/ empty, f/1 written after it: %d %v %v", n, unchanged, err)
					}
					if n, unchanged, err := s.DeletePrefixesUnchanged(ctx, counted, root+"e/"); err != nil || !unchanged || n != 1 {
						t.Fatalf("a purge of e/ since the count: %d %v %v", n, unchanged, err)
					}
					if _, err := s.DeletePrefixes(ctx, root+"f/"); err != nil {
						t.Fatal(err)
					}
				}

				// Two purgers at once (two replicas): every key goes, each counted once.
				var wg sync.WaitGroup
				var mu sync.Mutex
				var total int64
				for range 2 {
					wg.Go(func() {
						n, err := s.DeletePrefixes(ctx, root+"a/", root+"b/")
						if err != nil {
							t.Error(err)
						}
						mu.Lock()
						total += n
						mu.Unlock()
					})
				}
				wg.Wait()
				if total != many+2 {
					t.Fatalf("two purges deleted %d keys in all, want %d", total, many+2)
				}
				if n, err := s.Count(ctx, root+"a/", root+"b/"); err != nil || n != 0 {
					t.Fatalf("after the purge: %d %v", n, err)
				}
				if n, err := s.DeletePrefixes(ctx, root+"a/"); err != nil || n != 0 {
					t.Fatalf("a second purge: %d %v", n, err)
				}
				if ok, err := s.Exists(ctx, root+"ab/x"); err != nil || !ok {
					t.Fatalf("a range beside the purged one lost its key: %v %v", ok, err)
				}
			})
		}
	}
}

// readsCounted is a KV that counts the serializable and the linearizable
// reads made through it; from its behindFrom-th serializable read on (1:
// the first; 0: never), it answers them as a member that has not applied
// the revision asked for yet.
type readsCounted struct {
	clientv3.KV
	behindFrom                 int
	serializable, linearizable int
}

func (r *readsCounted) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if !clientv3.OpGet(key, opts...).IsSerializable() {
		r.linearizable++
		return r.KV.Get(ctx, key, opts...)
	}
	r.serializable++
	if r.behindFrom > 0 && r.serializable >= r.behindFrom {
		return nil, rpctypes.ErrFutureRev
	}
	return r.KV.Get(ctx, key, opts...)
}

// Keys and revisions are read serializably, at the revision asked for;
// from a member that has not applied that revision yet, linearizably, from
// the first key not read yet.
func TestKeyRevisionsReadSerializablyUnlessTheMemberIsBehind(t *testing.T) {
	etcd, err := framework.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	ctx := context.Background()
	var revision int64
	for i := range 5 {
		resp, err := etcd.Client.Put(ctx, fmt.Sprintf("/behind/%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		revision = resp.Header.Revision
	}
	if _, err := etcd.Client.Put(ctx, "/behind/later", "v"); err != nil {
		t.Fatal(err)
	}
	// Five keys in pages of two: three reads.
	for _, tc := range []struct {
		name                       string
		behindFrom                 int
		serializable, linearizable int
	}{
		{"a member that has applied the revision", 0, 3, 0},
		{"a member behind from the first page", 1, 1, 3},
		{"a member behind from the second page", 2, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := &readsCounted{KV: etcd.Client.KV, behindFrom: tc.behindFrom}
			client := clientv3.NewCtxClient(ctx)
			client.KV = kv
			var keys []string
			if err := keyranges.Etcd(client).KeyRevisions(ctx, "/behind/", "/behind0", revision, 2, func(key string, _ int64) error {
				keys = append(keys, key)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if want := []string{"/behind/0", "/behind/1", "/behind/2", "/behind/3", "/behind/4"}; !slices.Equal(keys, want) {
				t.Errorf("keys %v, want %v", keys, want)
			}
			if kv.serializable != tc.serializable || kv.linearizable != tc.linearizable {
				t.Errorf("%d serializable and %d linearizable reads, want %d and %d", kv.serializable, kv.linearizable, tc.serializable, tc.linearizable)
			}
		})
	}
	// What etcd answers for a revision it has not reached, through the
	// client's conversion of its errors, is what the fallback looks for.
	err = keyranges.Etcd(etcd.Client).KeyRevisions(ctx, "/behind/", "/behind0", revision+100, 2, func(string, int64) error { return nil })
	if !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("keys at a revision etcd has not reached: %v, want %v", err, rpctypes.ErrFutureRev)
	}
}
