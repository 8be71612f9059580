package server

import (
	"fmt"
	"slices"
	"sync"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"

	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
)

// inProcessEtcd makes the storages of the resources kept in the embedded
// etcd member as upstream's factory makes them — a gRPC client each, for
// its watches, leases and status — except that their reads (and, unless
// readsOnly, their writes) go through etcd's in-process client
// (embeddedetcd.Server.InProcessClient):
// the member's request handlers run in the caller's goroutine, with none of
// gRPC's encoding and framing on either side and none of the hand-offs
// between four transport goroutines that a round trip otherwise waits for
// (on a busy server, each waits for a core: a quiet tenant's GET, which
// upstream reads from etcd, waited longest there). Watches stay on gRPC:
// etcd's in-process watch streams can stall for good when many watches of
// one stream are cancelled at once (their cancel requests and replies wait
// on each other through buffers of one and sixteen; etcd-io/etcd#18879),
// which HTTP/2's buffering prevents. Resources kept in another etcd
// (--etcd-servers-overrides) keep upstream's clients.
type inProcessEtcd struct {
	// kv is the in-process client's KV: reads, and unless readsOnly,
	// writes and transactions.
	kv clientv3.KV
	// readsOnly sends the storages' writes (puts, deletes, transactions)
	// over gRPC: see ReadsInProcess.
	readsOnly bool
	// transport is how the member is reached over gRPC.
	transport storagebackend.TransportConfig

	mu sync.Mutex
	// compactor compacts the member (upstream's, on a client of its own),
	// while some storage uses it.
	compactor interface {
		etcd3.Compactor
		Stop()
	}
	compactorClient *clientv3.Client
	refs            int
}

// newInProcessEtcd returns the maker of storages that read (and, unless
// readsOnly, write) through in, a client of the member transport reaches;
// nil if in is nil.
func newInProcessEtcd(in *clientv3.Client, transport storagebackend.TransportConfig, readsOnly bool) *inProcessEtcd {
	if in == nil {
		return nil
	}
	return &inProcessEtcd{kv: in.KV, transport: transport, readsOnly: readsOnly}
}

// over is the KV a storage's client of the member reads and writes
// through, given its gRPC KV: in-process for reads only, or for
// everything.
func (p *inProcessEtcd) over(grpcKV clientv3.KV) clientv3.KV {
	if p.readsOnly {
		return embeddedetcd.ReadsInProcess(grpcKV, p.kv)
	}
	return p.kv
}

// serves tells whether config's resource is kept in the member.
func (p *inProcessEtcd) serves(config *storagebackend.ConfigForResource) bool {
	return p != nil && (config.Type == "" || config.Type == storagebackend.StorageTypeETCD3) &&
		slices.Equal(config.Transport.ServerList, p.transport.ServerList)
}

// raw makes a resource's storage without a cache, as generic.NewRawStorage
// does, reading and writing in-process where the member keeps it.
func (p *inProcessEtcd) raw(config *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	if !p.serves(config) {
		return generic.NewRawStorage(config, newFunc, newListFunc, resourcePrefix)
	}
	client, err := storageClient(p.transport, inProcessGRPCMetrics, p.over)
	if err != nil {
		return nil, nil, fmt.Errorf("the etcd client of %s: %w", config.GroupResource, err)
	}
	comp, err := p.startCompactor(config)
	if err != nil {
		client.Close() //nolint:errcheck
		return nil, nil, err
	}
	transformer := config.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	decoder := etcd3.NewDefaultDecoder(config.Codec, versioner)
	unsafeDeletion := utilfeature.DefaultFeatureGate.Enabled(genericfeatures.AllowUnsafeMalformedObjectDeletion)
	if unsafeDeletion {
		transformer = etcd3.WithCorruptObjErrorHandlingTransformer(transformer)
		decoder = etcd3.WithCorruptObjErrorHandlingDecoder(decoder)
	}
	var c etcd3.Compactor
	release := func() {}
	if comp != nil {
		c, release = comp, p.stopCompactor
	}
	store, err := etcd3.New(client, c, config.Codec, newFunc, newListFunc, config.Prefix, resourcePrefix, config.GroupResource,
		transformer, config.LeaseManagerConfig, decoder, versioner)
	if err != nil {
		release()
		client.Close() //nolint:errcheck
		return nil, nil, err
	}
	var once sync.Once
	destroy := func() {
		once.Do(func() {
			store.Close()
			release()
			client.Close() //nolint:errcheck // ends the storage's watches
		})
	}
	var s storage.Interface = store
	if unsafeDeletion {
		s = etcd3.NewStoreWithUnsafeCorruptObjectDeletion(s, config.GroupResource)
	}
	return s, destroy, nil
}

// decorator is raw as a storage decorator, for the resources without a
// watch cache.
func (p *inProcessEtcd) decorator(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(obj runtime.Object) (string, error),
	newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, trigger storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
	return p.raw(config, newFunc, newListFunc, resourcePrefix)
}

// startCompactor starts upstream's compactor of the member with the first
// storage, on a client of its own, as upstream's factory does (one per
// member in the process: a storage upstream made shares it), so that the
// member is compacted as before, every --etcd-compaction-interval; nil
// when compaction is off.
func (p *inProcessEtcd) startCompactor(config *storagebackend.ConfigForResource) (etcd3.Compactor, error) {
	if config.CompactionInterval == 0 {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.compactor == nil {
		c, err := storageClient(p.transport, inProcessGRPCMetrics, p.over)
		if err != nil {
			return nil, fmt.Errorf("the etcd client of the compactor: %w", err)
		}
		p.compactorClient = c.Client
		p.compactor = etcd3.StartCompactorPerEndpoint(c.Client, config.CompactionInterval)
	}
	p.refs++
	return p.compactor, nil
}

// stopCompactor stops the compactor once no storage uses it.
func (p *inProcessEtcd) stopCompactor() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refs--; p.refs == 0 {
		p.compactor.Stop()
		p.compactorClient.Close() //nolint:errcheck
		p.compactor, p.compactorClient = nil, nil
	}
}

// inProcessGRPCMetrics count the gRPC calls of the storages' clients of the
// embedded etcd (their watches, and their writes unless those are
// in-process too: their reads are in-process), as
// upstream's grpc_client_* metrics count those of its own clients.
var inProcessGRPCMetrics = grpcprom.NewClientMetrics(grpcprom.WithClientCounterOptions(grpcprom.WithNamespace("milo_etcd")))

func init() { legacyregistry.RawMustRegister(inProcessGRPCMetrics) }
