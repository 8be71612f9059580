package tenantstorage

import (
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAWriteLostToAnothersFailureKeepsItsRounds: in a shared
// transaction that failed on one write's own condition (its key exists),
// the tallies as expected, the others' round is lost to it, not counted
// toward maxTallyRounds (commitTallied), so a burst of failing writes
// cannot take all of another write's rounds; where the tallies moved, the
// round counts. Either way the others may share a transaction again.
func TestAWriteLostToAnothersFailureKeepsItsRounds(t *testing.T) {
	tallies := []Tally{{Key: "_milo/t", Revision: 5, Value: 3, Add: 2}}
	count := func(n int64) *etcdserverpb.ResponseOp {
		return &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{Count: n}}}
	}
	tally := func(rev int64, value string) *etcdserverpb.ResponseOp {
		return &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{
			Count: 1, Kvs: []*mvccpb.KeyValue{{Key: []byte("/registry/_milo/t"), ModRevision: rev, Value: []byte(value)}}}}}
	}
	for _, tc := range []struct {
		name                string
		tallyRev            int64
		tallyValue          string
		wantLost, wantAlone bool
	}{
		{"the tallies as expected", 5, "3", true, false},
		{"the tallies moved", 6, "4", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failing := &talliedTxn{elses: []clientv3.Op{clientv3.OpGet("a", clientv3.WithCountOnly())}}
			other := &talliedTxn{elses: []clientv3.Op{clientv3.OpGet("b", clientv3.WithCountOnly())}}
			resp := &clientv3.TxnResponse{Header: &etcdserverpb.ResponseHeader{Revision: 9},
				Responses: []*etcdserverpb.ResponseOp{count(1), count(0), tally(tc.tallyRev, tc.tallyValue)}}
			outs := (&store{}).failedBatch([]*talliedTxn{failing, other}, tallies, resp)
			if outs[0].moved || outs[0].lost || outs[0].err != nil {
				t.Fatalf("the write whose key exists: %+v, want done on its own failure", outs[0])
			}
			if !outs[1].moved || outs[1].lost != tc.wantLost || other.alone != tc.wantAlone {
				t.Fatalf("the other write: moved %v, lost %v, alone %v; want lost %v, alone %v", outs[1].moved, outs[1].lost, other.alone, tc.wantLost, tc.wantAlone)
			}
		})
	}
}
