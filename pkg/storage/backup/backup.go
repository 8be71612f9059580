// Package backup writes every key of Milo's storage to a file, as it is at
// one revision, and restores such a file into an empty storage.
//
// A backup is logical: keys and values, not etcd's database file, so it is
// taken from a running server without stopping it (one consistent read at
// one revision, a page at a time) and restored into any etcd — the restored
// keys get new revisions. Everything Milo stores is in it: the platform's
// objects, every project's, and the state of deletions and purges in
// progress, which the server resumes once started on the restored storage.
package backup

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// header is a backup file's first line.
type header struct {
	Format   string `json:"format"`
	Revision int64  `json:"revision"`
}

// format names the file format.
const format = "milo-backup/v1"

// record is one key, one line.
type record struct {
	Key   string `json:"k"`
	Value []byte `json:"v"`
}

// page is how many keys are read at a time.
const page = 500

// Save writes every key under prefix, as of one revision, to w; it returns
// how many keys and the revision.
func Save(ctx context.Context, client *clientv3.Client, prefix string, w io.Writer) (int, int64, error) {
	first, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, 0, fmt.Errorf("reading the storage: %w", err)
	}
	rev := first.Header.Revision
	out := bufio.NewWriter(w)
	enc := json.NewEncoder(out)
	if err := enc.Encode(header{Format: format, Revision: rev}); err != nil {
		return 0, 0, err
	}
	n := 0
	end := clientv3.GetPrefixRangeEnd(prefix)
	for key := prefix; ; {
		resp, err := client.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(page), clientv3.WithRev(rev))
		if err != nil {
			return n, rev, fmt.Errorf("reading the storage at revision %d: %w", rev, err)
		}
		for _, kv := range resp.Kvs {
			if err := enc.Encode(record{Key: string(kv.Key), Value: kv.Value}); err != nil {
				return n, rev, err
			}
			n++
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return n, rev, out.Flush()
}

// Restore writes every key of a backup into client's storage, which must
// hold none of them: it refuses a storage that is not empty under prefix.
func Restore(ctx context.Context, client *clientv3.Client, prefix string, r io.Reader) (int, error) {
	existing, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("reading the target storage: %w", err)
	}
	if existing.Count > 0 {
		return 0, fmt.Errorf("the target storage holds %d keys under %s: restore into an empty one", existing.Count, prefix)
	}
	dec := json.NewDecoder(bufio.NewReader(r))
	var h header
	if err := dec.Decode(&h); err != nil || h.Format != format {
		return 0, fmt.Errorf("not a Milo backup (want a first line of format %s): %v", format, err)
	}
	n := 0
	for {
		var rec record
		err := dec.Decode(&rec)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("reading record %d: %w", n+1, err)
		}
		if _, err := client.Put(ctx, rec.Key, string(rec.Value)); err != nil {
			return n, fmt.Errorf("writing %s: %w", rec.Key, err)
		}
		n++
	}
}
