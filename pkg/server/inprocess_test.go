package server

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"

	corev1 "k8s.io/api/core/v1"

	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
)

// A storage on the embedded etcd reads (and, unless it reads only, writes)
// in-process, with no gRPC call, and watches over gRPC, where a progress request reaches its watch: a
// watch cache serving a consistent list of a resource nobody writes waits
// for that progress notification.
func TestInProcessStorageReadsInProcessAndWatchesOverGRPC(t *testing.T) {
	dir := t.TempDir()
	files, err := pki.Ensure(filepath.Join(dir, "pki"), pki.ServingNames{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	clientURL, httpURL, peerURL, err := embeddedetcd.PickURLs()
	if err != nil {
		t.Fatal(err)
	}
	member, err := embeddedetcd.Start(context.Background(), embeddedetcd.Config{Dir: filepath.Join(dir, "etcd"), ClientURL: clientURL, HTTPURL: httpURL, PeerURL: peerURL,
		CertFile: files.EtcdServer.CertFile, KeyFile: files.EtcdServer.KeyFile, CAFile: files.CA.CertFile, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()

	cfg := storagebackend.NewDefaultConfig("/registry", legacyscheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion))
	cfg.Transport.ServerList = []string{member.ClientURL()}
	cfg.Transport.CertFile, cfg.Transport.KeyFile, cfg.Transport.TrustedCAFile = files.EtcdClient.CertFile, files.EtcdClient.KeyFile, files.CA.CertFile
	// Reads and writes in-process; then reads only, writes over gRPC (the
	// default): a get reads what the create wrote on the other path.
	for _, readsOnly := range []bool{false, true} {
		name := map[bool]string{false: "all", true: "reads"}[readsOnly]
		t.Run(name, func(t *testing.T) {
			p := newInProcessEtcd(member.InProcessClient(), cfg.Transport, readsOnly)
			other := cfg.ForResource(schema.GroupResource{Resource: "configmaps"})
			other.Transport.ServerList = []string{"https://127.0.0.1:1"}
			if p.serves(other) {
				t.Fatal("a resource kept in another etcd would be served in-process")
			}
			store, destroy, err := p.raw(cfg.ForResource(schema.GroupResource{Resource: "configmaps"}),
				func() runtime.Object { return &core.ConfigMap{} }, func() runtime.Object { return &core.ConfigMapList{} }, "/configmaps")
			if err != nil {
				t.Fatal(err)
			}
			defer destroy()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			calls := grpcCalls(t)
			var created core.ConfigMap
			if err := store.Create(ctx, "/configmaps/default/"+name, &core.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}, &created, 0); err != nil {
				t.Fatalf("create: %v", err)
			}
			var got core.ConfigMap
			if err := store.Get(ctx, "/configmaps/default/"+name, storage.GetOptions{}, &got); err != nil || got.UID != created.UID {
				t.Fatalf("get: %v, %v", got.UID, err)
			}
			n := grpcCalls(t)
			if n["Range"] != calls["Range"] {
				t.Fatalf("a get made a gRPC call: %v, then %v", calls, n)
			}
			if wroteOverGRPC := n["Txn"] > calls["Txn"]; wroteOverGRPC != readsOnly {
				t.Fatalf("a create made a gRPC call: %v (%v, then %v); want one only with writes over gRPC", wroteOverGRPC, calls, n)
			}

			w, err := store.Watch(ctx, "/configmaps/", storage.ListOptions{ResourceVersion: created.ResourceVersion, Recursive: true,
				Predicate: storage.Everything, ProgressNotify: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			// Another resource's write moves etcd's revision past the watch's last
			// event: only a progress notification tells the watch.
			put, err := member.InProcessClient().Put(ctx, "/registry/secrets/default/"+name, "x")
			if err != nil {
				t.Fatal(err)
			}
			// Asked again until one comes, as a watch cache asks while it waits: a
			// request that reaches the stream before the watch is on it is lost.
			ask := time.NewTicker(100 * time.Millisecond)
			defer ask.Stop()
			timeout := time.After(10 * time.Second)
			for progressed := false; !progressed; {
				if err := store.RequestWatchProgress(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case e := <-w.ResultChan():
					if e.Type != watch.Bookmark {
						t.Fatalf("got %s, want a progress notification (bookmark)", e.Type)
					}
					rv, _ := strconv.ParseInt(e.Object.(*core.ConfigMap).ResourceVersion, 10, 64)
					if rv < put.Header.Revision {
						t.Fatalf("progress at %d, want at least %d", rv, put.Header.Revision)
					}
					progressed = true
				case <-ask.C:
				case <-timeout:
					t.Fatal("no progress notification reached the resource's watch")
				}
			}
			if grpcCalls(t)["Watch"] <= calls["Watch"] {
				t.Fatal("the watch was not opened over gRPC")
			}
		})
	}
}

// grpcCalls are the gRPC calls the storages' clients of the embedded etcd
// started, by method.
func grpcCalls(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "milo_etcd_grpc_client_started_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
