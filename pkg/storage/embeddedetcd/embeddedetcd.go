// Package embeddedetcd runs a single-node etcd inside the Milo process, so that
// `milo start` needs nothing but its data directory.
//
// The member listens on loopback only, on ports picked when it starts, and
// requires mutual TLS on each of them (client, HTTP and peer): any local
// process can reach loopback, but only holders of a certificate from Milo's
// CA get in.
package embeddedetcd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

// Config says where the member keeps its data and which certificates it uses.
type Config struct {
	// Dir is the etcd data directory (member/wal, member/snap).
	Dir string
	// ClientURL and PeerURL are where the member listens; PickURLs chooses free loopback ones.
	ClientURL, PeerURL url.URL
	// HTTPURL, when set, is where the member serves its HTTP endpoints
	// (/health, /metrics, /version), and ClientURL serves gRPC alone. On one
	// port etcd serves both through Go's HTTP/2 server, which hands gRPC to
	// grpc-go's ServeHTTP: the slow path of every storage request, which its
	// own transport, serving ClientURL alone, does not take.
	HTTPURL url.URL
	// CertFile and KeyFile serve every port (client, HTTP and peer); CAFile verifies clients.
	CertFile, KeyFile, CAFile string
	// QuotaBackendBytes bounds the database; 0 means the default of this package (8 GiB),
	// larger than etcd's own 2 GiB because one Milo holds many projects.
	QuotaBackendBytes int64
	// UnsafeNoFsync skips fsync on writes. Only for tests and benchmarks: a crash loses data.
	UnsafeNoFsync bool
	// StartTimeout bounds how long Start waits for the member to serve; 0 means one minute.
	StartTimeout time.Duration
	// Name and InitialCluster ("name=peerURL,...") make the member one of a
	// static cluster; empty: a single member named milo.
	Name, InitialCluster string
}

// Server is a running embedded etcd member.
type Server struct {
	etcd      *embed.Etcd
	clientURL string
	// single: the member is a cluster of its own (InProcessClient).
	single    bool
	mu        sync.Mutex
	inClients []*clientv3.Client
}

const defaultQuota = 8 << 30

// streamWorkers is how many goroutines serve gRPC calls (see Start).
const streamWorkers = 128

// MaxTxnOps is how many compares, and how many operations, the embedded
// etcd accepts in one transaction (etcd's --max-txn-ops; 128 by default).
const MaxTxnOps = 1024

// Start starts the member and returns once it serves client requests.
func Start(ctx context.Context, c Config) (*Server, error) {
	clientURL, peerURL := c.ClientURL, c.PeerURL
	cfg := embed.NewConfig()
	cfg.Name = "milo"
	if c.Name != "" {
		cfg.Name = c.Name
	}
	cfg.Dir = c.Dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	if c.HTTPURL.Host != "" {
		cfg.ListenClientHttpUrls = []url.URL{c.HTTPURL}
	}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Ports change from one start to the next; the single member has no peers to tell.
	cfg.StrictReconfigCheck = false
	if c.InitialCluster != "" {
		cfg.InitialCluster = c.InitialCluster
		cfg.InitialClusterToken = "milo-etcd"
		cfg.StrictReconfigCheck = true
	}
	tls := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.CAFile, ClientCertAuth: true}
	cfg.ClientTLSInfo = tls
	cfg.PeerTLSInfo = tls
	cfg.QuotaBackendBytes = c.QuotaBackendBytes
	if cfg.QuotaBackendBytes == 0 {
		cfg.QuotaBackendBytes = defaultQuota
	}
	// The API server compacts on its own schedule (--etcd-compaction-interval).
	cfg.AutoCompactionRetention = "0"
	cfg.UnsafeNoFsync = c.UnsafeNoFsync
	// Calls are served by long-lived workers, whose stacks have grown, and
	// not each by a new goroutine that grows its stack through etcd's
	// handler chain doubling by doubling (a fifth of the server's stack
	// growth in CPU profiles). A call finding no worker idle gets a
	// goroutine as before, and a watch stream holds its worker for its
	// life, so there are more workers than the API server has watch
	// streams (one per resource).
	cfg.GRPCAdditionalServerOptions = append(cfg.GRPCAdditionalServerOptions, grpc.NumStreamWorkers(streamWorkers))
	// Creates waiting for the same quota count are committed in one
	// transaction (tenantstorage's turns), a project's seven keys each:
	// at etcd's default of 128 operations, 18 of them.
	cfg.MaxTxnOps = MaxTxnOps
	cfg.LogLevel = "error"
	// embed.NewConfig leaves this at 0, which makes every request "slow":
	// etcd then renders each request and response as text for a warning
	// the log level drops (a charged create's transaction, claim and
	// object included, cost a tenth of a millisecond of CPU).
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	cfg.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %s: %w", c.Dir, err)
	}
	timeout := c.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd did not become ready within %s", timeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	klog.InfoS("Embedded etcd is serving", "dir", c.Dir, "clientURL", clientURL.String(), "httpURL", c.HTTPURL.String())
	return &Server{etcd: e, clientURL: clientURL.String(), single: c.InitialCluster == ""}, nil
}

// InProcessClient is a client that calls the member's request handlers in
// the caller's goroutine (etcd's v3client): no gRPC framing, no loopback
// connection, no encoding of requests and responses, and none of the
// hand-offs between the client's and the server's transport goroutines,
// which a busy server's scheduler delays. Its watches are etcd's in-process
// streams, which can stall when many of one stream's watches are cancelled
// at once (etcd-io/etcd#18879): the API server watches over gRPC and uses
// this client's KV. nil when the member is one of a cluster, whose clients
// reach it over gRPC as any member of a cluster. Each call makes a client
// of its own, which ends with the member.
func (s *Server) InProcessClient() *clientv3.Client {
	if !s.single {
		return nil
	}
	c := v3client.New(s.etcd.Server)
	s.mu.Lock()
	s.inClients = append(s.inClients, c)
	s.mu.Unlock()
	return c
}

// ClientURL is the URL the API server uses to reach the member.
func (s *Server) ClientURL() string { return s.clientURL }

// Err reports errors the member hits after it started.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the member gracefully, flushing its write-ahead log.
func (s *Server) Close() {
	s.mu.Lock()
	for _, c := range s.inClients {
		c.Close() //nolint:errcheck // ends its watches; nothing to flush
	}
	s.mu.Unlock()
	s.etcd.Close()
	<-s.etcd.Server.StopNotify()
	klog.InfoS("Embedded etcd stopped")
}

// PickURLs chooses a client, an HTTP and a peer URL on distinct free
// loopback ports.
func PickURLs() (client, http, peer url.URL, err error) {
	ports, err := freeLoopbackPorts(3)
	if err != nil {
		return url.URL{}, url.URL{}, url.URL{}, err
	}
	at := func(port int) url.URL {
		return url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	}
	return at(ports[0]), at(ports[1]), at(ports[2]), nil
}

// freeLoopbackPorts asks the kernel for n distinct free ports on 127.0.0.1.
// They are released before etcd binds them; losing that race fails the start
// with a clear "address in use" error rather than silently using another port.
func freeLoopbackPorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close() //nolint:errcheck
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ReadsInProcess is a KV that reads through in, the member's in-process
// client (InProcessClient), and writes (puts, deletes, transactions,
// compactions) through grpc, a client of the member over gRPC. A read
// skips gRPC's encoding, framing and hand-offs between goroutines, which
// a read of many objects (a watch cache's fill at a restart) and a quiet
// tenant's GET on a busy server pay most for. Writes keep gRPC's pace:
// with writes in-process too, etcd moved the API server's watchers aside
// more often during a flood of creates (docs/performance.md, "The
// embedded etcd read and written in-process"). A read in-process sees
// every write the member acknowledged over gRPC: both reach one member,
// which answers a write once it has applied it.
func ReadsInProcess(grpc, in clientv3.KV) clientv3.KV {
	return readsInProcess{KV: grpc, in: in}
}

type readsInProcess struct {
	clientv3.KV
	in clientv3.KV
}

func (r readsInProcess) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return r.in.Get(ctx, key, opts...)
}

func (r readsInProcess) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	if op.IsGet() {
		return r.in.Do(ctx, op)
	}
	return r.KV.Do(ctx, op)
}
