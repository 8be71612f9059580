package tenantstorage

import (
	"context"
	"path"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SetCount writes value, what a read of storage at revision counted, to
// the tally at key (under storagePrefix) where the tally is still as it
// was before the read (at revision was; 0: absent), on the condition that
// mark (if set) was not written after revision: every delete of what the
// tally counts writes mark (see TalliesOf), so a count a delete made wrong
// meanwhile is not written. Every create moves the tally, or, where it is
// absent (not counted yet: Keep), waits for it: no create of the epoch was
// stored since the read. The other keys beside key (in its directory, but
// mark) are tallies of earlier epochs, deleted in the same transaction on
// the condition that none moved after revision (a create of a server that
// still knew an earlier epoch, which the read may have missed).
//
// It returns what the tally holds: value, or another's count written
// first; ok is false when something moved, and the count is to be made
// again.
func SetCount(ctx context.Context, kv clientv3.KV, storagePrefix, key, mark string, value, revision, was int64) (now Tally, ok bool, err error) {
	base := path.Join("/", storagePrefix) + "/"
	full := base + key
	old, err := kv.Get(ctx, path.Dir(full)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(txnLimit))
	if err != nil {
		return Tally{}, false, err
	}
	thens := []clientv3.Op{clientv3.OpPut(full, strconv.FormatInt(value, 10))}
	ifs := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(full), "=", was)}
	for _, k := range old.Kvs {
		if s := string(k.Key); s != full && (mark == "" || s != base+mark) {
			thens = append(thens, clientv3.OpDelete(s))
			ifs = append(ifs, clientv3.Compare(clientv3.ModRevision(s), "<", revision+1))
		}
	}
	if mark != "" {
		ifs = append(ifs, clientv3.Compare(clientv3.ModRevision(base+mark), "<", revision+1))
	}
	resp, err := kv.Txn(ctx).If(ifs...).Then(thens...).Else(clientv3.OpGet(full)).Commit()
	if err != nil {
		return Tally{}, false, err
	}
	if resp.Succeeded {
		return Tally{Key: key, Revision: resp.Header.Revision, Value: value, Keep: true}, true, nil
	}
	read, _, err := talliesRead([]Tally{{Key: key, Keep: true}}, resp.Responses)
	if err != nil {
		return Tally{}, false, err
	}
	// Another's count, written first, is taken; a tally that moved from
	// one being counted again is counted again.
	return read[0], was == 0 && read[0].Revision > 0, nil
}
