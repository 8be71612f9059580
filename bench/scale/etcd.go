package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/server"
)

// etcdResult is etcd's maintenance at the last step (Milo on its embedded
// etcd, --etcd-maintenance): what the projects cost in keys and bytes, and
// how long compacting and defragmenting that database take.
type etcdResult struct {
	Projects int
	// Keys is every key in etcd; KeysPerProject that over the projects
	// (the platform's own keys included, a few hundred).
	Keys           int64
	KeysPerProject float64
	// Database size and the part of it in use, before compaction, after
	// it and after defragmentation (bytes).
	DBBefore, InUseBefore, DBCompacted, InUseCompacted, DBDefragmented int64
	// CompactSeconds: compacting every revision before the current one,
	// waiting for the compaction to be physical; DefragSeconds: the
	// defragmentation that follows (etcd serves nothing meanwhile).
	CompactSeconds, DefragSeconds float64
	// Revision is the revision compacted to: every write the etcd has
	// taken.
	Revision int64
}

// measureEtcd reaches the embedded etcd of s through its data directory
// (the server running) and measures keys, size, compaction and
// defragmentation.
func measureEtcd(ctx context.Context, s *system, projects int) (*etcdResult, error) {
	c, endpoint, err := s.embeddedEtcd()
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("the server runs on no embedded etcd")
	}
	defer c.Close()
	out := &etcdResult{Projects: projects}
	keys, err := c.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return nil, err
	}
	out.Keys, out.KeysPerProject = keys.Count, float64(keys.Count)/float64(max(projects, 1))
	status := func() (*clientv3.StatusResponse, error) { return c.Status(ctx, endpoint) }
	st, err := status()
	if err != nil {
		return nil, err
	}
	out.DBBefore, out.InUseBefore = st.DbSize, st.DbSizeInUse
	rev := keys.Header.Revision
	// What the apiserver compacts to on its own (every
	// --etcd-compaction-interval) is behind; compact to now.
	began := time.Now()
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return nil, fmt.Errorf("compacting at revision %d: %w", rev, err)
	}
	out.CompactSeconds = time.Since(began).Seconds()
	if st, err = status(); err != nil {
		return nil, err
	}
	out.DBCompacted, out.InUseCompacted, out.Revision = st.DbSize, st.DbSizeInUse, rev
	began = time.Now()
	if _, err := c.Defragment(ctx, endpoint); err != nil {
		return nil, fmt.Errorf("defragmenting: %w", err)
	}
	out.DefragSeconds = time.Since(began).Seconds()
	if st, err = status(); err != nil {
		return nil, err
	}
	out.DBDefragmented = st.DbSize
	return out, nil
}

// embeddedEtcd is a client of the embedded etcd of s, reached through its
// data directory while the server runs, and its endpoint; nil if the server
// runs on another storage (no etcd.url).
func (s *system) embeddedEtcd() (*clientv3.Client, string, error) {
	url, err := os.ReadFile(server.EtcdURLFile(s.dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	_, files, err := server.DataDirEtcd(s.dataDir)
	if err != nil {
		return nil, "", err
	}
	tls, err := transport.TLSInfo{CertFile: files.EtcdClient.CertFile, KeyFile: files.EtcdClient.KeyFile, TrustedCAFile: files.CA.CertFile}.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	endpoint := strings.TrimSpace(string(url))
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tls, DialTimeout: 10 * time.Second})
	return c, endpoint, err
}

// quotaFills is how many projects fill an etcd quota of quota bytes, at
// the bytes in use per project measured.
func (e *etcdResult) quotaFills(quota float64) float64 {
	return quota / (float64(e.InUseCompacted) / float64(max(e.Projects, 1)))
}

func (e *etcdResult) section() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## etcd at %d projects\n\nThe embedded etcd, reached through the data directory while the server runs: every key counted, then compacted to the current revision (physically) and defragmented.\n\n", e.Projects)
	b.WriteString("| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| Keys | %d (%.1f per project, the platform's included) |\n", e.Keys, e.KeysPerProject)
	fmt.Fprintf(&b, "| Database / in use, before compaction | %.1f / %.1f MiB |\n", toMiB(float64(e.DBBefore)), toMiB(float64(e.InUseBefore)))
	fmt.Fprintf(&b, "| Compaction to revision %d | %.2f s |\n", e.Revision, e.CompactSeconds)
	fmt.Fprintf(&b, "| Database / in use, compacted | %.1f / %.1f MiB (%.1f KiB in use per project) |\n", toMiB(float64(e.DBCompacted)), toMiB(float64(e.InUseCompacted)), float64(e.InUseCompacted)/1024/float64(max(e.Projects, 1)))
	fmt.Fprintf(&b, "| Defragmentation | %.2f s |\n", e.DefragSeconds)
	fmt.Fprintf(&b, "| Database, defragmented | %.1f MiB |\n", toMiB(float64(e.DBDefragmented)))
	fmt.Fprintf(&b, "| Projects that fill 2 GiB / 8 GiB (at this use per project) | %.0f / %.0f |\n\n", e.quotaFills(2<<30), e.quotaFills(8<<30))
	return b.String()
}

func toMiB(v float64) float64 { return v / (1 << 20) }

// etcdMetrics reads the embedded etcd's own metrics (its HTTP port, named in
// the server's log, with the data directory's etcd client certificate);
// nil, with no error, where the server runs on no embedded etcd.
func (s *system) etcdMetrics(ctx context.Context) (metrics, error) {
	logged, err := os.ReadFile(filepath.Join(filepath.Dir(s.dataDir), s.name+".log"))
	if err != nil {
		return nil, err
	}
	const mark = `httpURL="`
	i := strings.LastIndex(string(logged), mark)
	if i < 0 {
		return nil, nil
	}
	url, _, _ := strings.Cut(string(logged[i+len(mark):]), `"`)
	// The layout only: nothing in the running server's data directory is written.
	files := pki.Layout(filepath.Join(s.dataDir, "pki"))
	tls, err := transport.TLSInfo{CertFile: files.EtcdClient.CertFile, KeyFile: files.EtcdClient.KeyFile, TrustedCAFile: files.CA.CertFile}.ClientConfig()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tls}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd metrics: %s", resp.Status)
	}
	return parseMetrics(string(body)), nil
}

// etcdStalls is what the embedded etcd did between two readings of its
// metrics that stalls writes: walks of its in-memory key index (a
// compaction's first step, over every key), compaction batches (each holds
// the backend's write lock and commits), and WAL fsyncs and backend commits
// over 32 ms.
type etcdStalls struct {
	IndexWalks, IndexWalkMs              float64
	CompactionBatches, CompactionPauseMs float64
	SlowFsyncs, SlowCommits              float64
}

func etcdStallsBetween(before, after metrics) *etcdStalls {
	if before == nil || after == nil {
		return nil
	}
	delta := func(name string, labels ...string) float64 {
		return after.sum(name, labels...) - before.sum(name, labels...)
	}
	over := func(name string) float64 {
		return delta(name+"_count") - delta(name+"_bucket", `le="0.032"`)
	}
	return &etcdStalls{
		IndexWalks:        delta("etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds_count"),
		IndexWalkMs:       delta("etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds_sum"),
		CompactionBatches: delta("etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds_count"),
		CompactionPauseMs: delta("etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds_sum"),
		SlowFsyncs:        over("etcd_disk_wal_fsync_duration_seconds"),
		SlowCommits:       over("etcd_disk_backend_commit_duration_seconds"),
	}
}
