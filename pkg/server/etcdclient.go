package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"google.golang.org/grpc"
	grpcmetadata "google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"

	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenantadmission"
)

// NewEtcdClient opens a client to the etcd t names (TLS when t has files):
// the server's own, for the operations that work on key ranges rather than
// objects, and the commands that work on a stopped server's storage.
func NewEtcdClient(t storagebackend.TransportConfig) (*clientv3.Client, error) {
	cfg, err := etcdClientConfig(t)
	if err != nil {
		return nil, err
	}
	return clientv3.New(cfg)
}

// etcdClientConfig is the configuration of a client to the etcd t names.
func etcdClientConfig(t storagebackend.TransportConfig) (clientv3.Config, error) {
	cfg := clientv3.Config{Endpoints: t.ServerList, DialTimeout: 20 * time.Second,
		DialKeepAliveTime: 30 * time.Second, DialKeepAliveTimeout: 10 * time.Second}
	if t.CertFile != "" || t.KeyFile != "" || t.TrustedCAFile != "" {
		tls, err := transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile}.ClientConfig()
		if err != nil {
			return cfg, fmt.Errorf("etcd client TLS: %w", err)
		}
		cfg.TLS = tls
	}
	return cfg, nil
}

// storageClient is a client of the etcd transport names, its gRPC calls
// counted in metrics, reading and writing through the KV over makes of its
// gRPC KV (nil: that KV), each request's latency recorded as upstream's
// clients record it.
func storageClient(transport storagebackend.TransportConfig, metrics *grpcprom.ClientMetrics, over func(clientv3.KV) clientv3.KV) (*kubernetes.Client, error) {
	cfg, err := etcdClientConfig(transport)
	if err != nil {
		return nil, err
	}
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(metrics.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(metrics.StreamClientInterceptor()))
	c, err := kubernetes.New(cfg)
	if err != nil {
		return nil, err
	}
	kv := c.KV
	if over != nil {
		kv = over(kv)
	}
	c.KV = etcd3.NewETCDLatencyTracker(kv)
	return c, nil
}

// sharedEtcd opens one etcd client for every storage it makes: the
// storages of projects' own kinds — one per schema class and version, built
// and torn down as tenants define and change CRDs — would otherwise each
// open a client of their own (upstream's storage factory does), a
// connection and its goroutines for every distinct schema.
type sharedEtcd struct {
	// inProcess, if not nil, is the embedded etcd, which the client reads
	// (and, as it says, writes) in-process.
	inProcess *inProcessEtcd

	mu     sync.Mutex
	client *kubernetes.Client
}

// storage is a generic.StorageDecorator making an uncached etcd storage on
// the shared client, as upstream's factory makes one on a client of its own.
func (s *sharedEtcd) storage(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(obj runtime.Object) (string, error),
	newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, trigger storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
	if config.Type != "" && config.Type != storagebackend.StorageTypeETCD3 {
		return generic.UndecoratedStorage(config, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrs, trigger, indexers)
	}
	s.mu.Lock()
	if s.client == nil {
		var over func(clientv3.KV) clientv3.KV
		if s.inProcess.serves(config) {
			over = s.inProcess.over
		}
		c, err := storageClient(config.Transport, projectKindsGRPCMetrics, over)
		if err != nil {
			s.mu.Unlock()
			return nil, nil, fmt.Errorf("the etcd client of projects' kinds: %w", err)
		}
		s.client = c
	}
	client := s.client
	s.mu.Unlock()
	transformer := config.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	store, err := etcd3.New(client, nil, config.Codec, newFunc, newListFunc, config.Prefix, resourcePrefix, config.GroupResource,
		transformer, config.LeaseManagerConfig, etcd3.NewDefaultDecoder(config.Codec, versioner), versioner)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	// The client stays: it is every such storage's. What ends the
	// storage's watches is the end of its context (upstream's ends them by
	// closing the storage's own client).
	return &endingStore{Interface: store, ctx: ctx, stream: resourcePrefix}, func() {
		once.Do(func() {
			cancel()
			store.Close()
		})
	}, nil
}

// projectKindsGRPCMetrics count the shared client's calls, as upstream's
// grpc_client_* metrics count those of its own clients.
var projectKindsGRPCMetrics = grpcprom.NewClientMetrics(grpcprom.WithClientCounterOptions(grpcprom.WithNamespace("milo_project_kinds")))

func init() { legacyregistry.RawMustRegister(projectKindsGRPCMetrics) }

// endingStore is a storage on the shared client whose watches end when it
// is torn down, each resource's watches on a gRPC stream of their own.
type endingStore struct {
	storage.Interface
	ctx    context.Context
	stream string
}

func (s *endingStore) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	// Released however the watch ends: stopped, or its request ended
	// without stopping it (a watch the handler could not serve).
	context.AfterFunc(ctx, func() { stop() })
	// The etcd client puts watches whose outgoing metadata are equal on one
	// stream: one per resource, as with upstream's client per storage, so
	// that no resource's watches wait behind another's.
	w, err := s.Interface.Watch(grpcmetadata.AppendToOutgoingContext(ctx, "milo-resource", s.stream), key, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	return &endingWatch{Interface: w, cancel: cancel}, nil
}

// endingWatch ends its context when stopped.
type endingWatch struct {
	watch.Interface
	cancel context.CancelFunc
}

func (w *endingWatch) Stop() {
	w.Interface.Stop()
	w.cancel()
}

// keyRangesOf is the key-range store of the server's storage: kine's when
// the storage is SQL, etcd's otherwise.
func keyRangesOf(client *clientv3.Client, sql bool) keyranges.Store {
	if sql {
		return keyranges.Kine(client)
	}
	return keyranges.Etcd(client)
}

// objectCounter counts a project's objects by key prefix.
func objectCounter(keys keyranges.Store, prefixes *tenantstorage.Prefixes) tenantadmission.ObjectCounter {
	return func(ctx context.Context, resource schema.GroupResource, projectID, namespace string) (int64, error) {
		return tenantstorage.CountInNamespace(ctx, keys, prefixes, resource, projectID, namespace)
	}
}

// objectExists looks a project's object up by key.
func objectExists(keys keyranges.Store, prefixes *tenantstorage.Prefixes) tenantadmission.ObjectExists {
	return func(ctx context.Context, resource schema.GroupResource, projectID, namespace, name string) (bool, error) {
		return tenantstorage.ExistsInNamespace(ctx, keys, prefixes, resource, projectID, namespace, name)
	}
}
