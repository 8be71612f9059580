package server

import (
	"context"
	"slices"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
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
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// inProcessEtcd makes the storages of the resources kept in the embedded
// etcd member on one client that calls the member in-process
// (embeddedetcd.Server.InProcessClient), where upstream's factory opens a
// gRPC connection per resource over the loopback. Every read and write of
// the API server then skips gRPC's encoding and framing on both sides, and
// the hand-offs between four transport goroutines that a request's round
// trip otherwise waits for: on a busy server (another tenant's watches
// being woken for an event), each hand-off waits for a core, and a quiet
// tenant's GET, which upstream reads from etcd, waited longest there.
// Resources kept in another etcd (--etcd-servers-overrides) keep upstream's
// clients.
type inProcessEtcd struct {
	client *kubernetes.Client
	// servers are the member's client URLs as the storage configs name them.
	servers []string

	mu        sync.Mutex
	compactor compactor
	refs      int
}

// compactor is upstream's etcd compactor (etcd3.StartCompactorPerEndpoint).
type compactor interface {
	etcd3.Compactor
	Stop()
}

// newInProcessEtcd returns the maker of storages on c, a client of the
// member servers names; nil if c is nil.
func newInProcessEtcd(c *clientv3.Client, servers []string) *inProcessEtcd {
	if c == nil {
		return nil
	}
	kc := &kubernetes.Client{Client: c}
	kc.Kubernetes = kc
	// Latency per request, as upstream's clients record it.
	kc.KV = etcd3.NewETCDLatencyTracker(kc.KV)
	return &inProcessEtcd{client: kc, servers: servers}
}

// serves tells whether config's resource is kept in the member.
func (p *inProcessEtcd) serves(config *storagebackend.ConfigForResource) bool {
	return p != nil && (config.Type == "" || config.Type == storagebackend.StorageTypeETCD3) &&
		slices.Equal(config.Transport.ServerList, p.servers)
}

// raw makes a resource's storage without a cache, as generic.NewRawStorage
// does: on the in-process client where the member keeps the resource.
func (p *inProcessEtcd) raw(config *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	if !p.serves(config) {
		return generic.NewRawStorage(config, newFunc, newListFunc, resourcePrefix)
	}
	comp := p.startCompactor(config)
	release := func() {}
	if comp != nil {
		release = p.stopCompactor
	}
	transformer := config.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	decoder := etcd3.NewDefaultDecoder(config.Codec, versioner)
	if utilfeature.DefaultFeatureGate.Enabled(genericfeatures.AllowUnsafeMalformedObjectDeletion) {
		transformer = etcd3.WithCorruptObjErrorHandlingTransformer(transformer)
		decoder = etcd3.WithCorruptObjErrorHandlingDecoder(decoder)
	}
	var c etcd3.Compactor
	if comp != nil {
		c = comp
	}
	store, err := etcd3.New(p.client, c, config.Codec, newFunc, newListFunc, config.Prefix, resourcePrefix, config.GroupResource,
		transformer, config.LeaseManagerConfig, decoder, versioner)
	if err != nil {
		release()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	// Each resource's watches on a stream of their own, ended when the
	// storage is torn down, as for projects' kinds on the shared client.
	return &endingStore{Interface: store, ctx: ctx, stream: resourcePrefix, streams: inProcessStreams}, func() {
		once.Do(func() {
			cancel()
			store.Close()
			release()
		})
	}, nil
}

// streamCount counts the watch streams of a client with a watch open, by
// stream, for a metric: the in-process client has no gRPC client metrics.
type streamCount struct {
	mu       sync.Mutex
	watching map[string]int
	gauge    *metrics.Gauge
}

func (c *streamCount) open(stream string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watching[stream]++; c.watching[stream] == 1 {
		c.gauge.Set(float64(len(c.watching)))
	}
}

func (c *streamCount) close(stream string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watching[stream]--; c.watching[stream] <= 0 {
		delete(c.watching, stream)
		c.gauge.Set(float64(len(c.watching)))
	}
}

// inProcessStreams counts the in-process client's watch streams: one per
// resource with a watch open, as upstream's gRPC clients of etcd count
// theirs (grpc_client_started_total less grpc_client_handled_total of
// method Watch).
var inProcessStreams = &streamCount{watching: map[string]int{}, gauge: metrics.NewGauge(&metrics.GaugeOpts{
	Name:           "milo_etcd_in_process_watch_streams",
	Help:           "Watch streams the API server holds on the embedded etcd's in-process client: one per resource with a watch of etcd open.",
	StabilityLevel: metrics.ALPHA,
})}

func init() { legacyregistry.MustRegister(inProcessStreams.gauge) }

// decorator is raw as a storage decorator, for the resources without a
// watch cache.
func (p *inProcessEtcd) decorator(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(obj runtime.Object) (string, error),
	newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, trigger storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
	return p.raw(config, newFunc, newListFunc, resourcePrefix)
}

// startCompactor starts upstream's compactor of the member with the first
// storage, as upstream's factory does with a storage's client (and the
// member is compacted as before: every --etcd-compaction-interval, by one
// server of those sharing it); nil when compaction is off.
func (p *inProcessEtcd) startCompactor(config *storagebackend.ConfigForResource) compactor {
	if config.CompactionInterval == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.compactor == nil {
		p.compactor = etcd3.StartCompactorPerEndpoint(p.client.Client, config.CompactionInterval)
	}
	p.refs++
	return p.compactor
}

// stopCompactor stops the compactor once no storage uses it.
func (p *inProcessEtcd) stopCompactor() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refs--; p.refs == 0 {
		p.compactor.Stop()
		p.compactor = nil
	}
}
