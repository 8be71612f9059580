package tenantstorage

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSetCountWritesOnlyAFreshCount: a count is written where none is yet
// and no delete of what it counts was made after the revision it read,
// deleting the tallies of earlier epochs with it; a count made wrong by a
// delete meanwhile is not written, and one another wrote first is returned.
func TestSetCountWritesOnlyAFreshCount(t *testing.T) {
	ctx := context.Background()
	run := benchRuns.Add(1)
	dir := fmt.Sprintf("_milo/test-counts/%d/", run)
	key, mark, old := dir+"epoch-2", dir+"deletes", dir+"epoch-1"
	put := func(k, v string) int64 {
		t.Helper()
		resp, err := etcdClient.Put(ctx, "/registry/"+k, v)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	put(old, "7")
	read := put(mark, "") // a delete, then the count's read
	// A delete after the read: not written, to be counted again.
	put(mark, "")
	if now, ok, err := SetCount(ctx, etcdClient, "/registry", key, mark, 5, read, 0); err != nil || ok || now.Revision != 0 {
		t.Fatalf("a count read before a delete was written: %+v %v %v", now, ok, err)
	}
	// Counted again after it: written, and the earlier epoch's tally gone.
	read = put(dir+"unrelated-write", "")
	now, ok, err := SetCount(ctx, etcdClient, "/registry", key, mark, 4, read, 0)
	if err != nil || !ok || now.Value != 4 || now.Revision <= read || !now.Keep {
		t.Fatalf("a fresh count: %+v %v %v", now, ok, err)
	}
	if got, err := etcdClient.Get(ctx, "/registry/"+old); err != nil || len(got.Kvs) != 0 {
		t.Fatalf("the earlier epoch's tally: %v %v", got, err)
	}
	if got, err := etcdClient.Get(ctx, "/registry/"+mark); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("the deletes' mark was not kept: %v %v", got, err)
	}
	// Counted again from a count at its revision: written where it did
	// not move, not where a create of an earlier epoch moved that one.
	again, ok, err := SetCount(ctx, etcdClient, "/registry", key, mark, 6, now.Revision, now.Revision)
	if err != nil || !ok || again.Value != 6 {
		t.Fatalf("a count made again: %+v %v %v", again, ok, err)
	}
	now = again
	read = put(old, "3")
	if got, ok, err := SetCount(ctx, etcdClient, "/registry", dir+"epoch-3", mark, 2, read-1, 0); err != nil || ok {
		t.Fatalf("a count read before an earlier epoch's tally moved was written: %+v %v %v", got, ok, err)
	}
	if _, err := etcdClient.Delete(ctx, "/registry/"+old); err != nil {
		t.Fatal(err)
	}
	// Another server's count, made at once, finds it and takes it.
	other, ok, err := SetCount(ctx, etcdClient, "/registry", key, mark, 9, read, 0)
	if err != nil || !ok || other != now {
		t.Fatalf("a second count: %+v %v %v, want the first's %+v", other, ok, err, now)
	}
	if got, err := etcdClient.Get(ctx, "/registry/"+key, clientv3.WithCountOnly()); err != nil || got.Count != 1 {
		t.Fatalf("the count: %v %v", got, err)
	}
}
