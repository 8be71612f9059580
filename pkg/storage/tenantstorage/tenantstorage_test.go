package tenantstorage

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes/scheme"

	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
	"go.miloapis.com/milo/pkg/tenancy"
)

// One real etcd for the package, as the server runs it (TLS, loopback).
var (
	etcdConfig storagebackend.Config
	etcdClient *clientv3.Client
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tenantstorage-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	files, err := pki.Ensure(filepath.Join(dir, "pki"), pki.ServingNames{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	clientURL, peerURL, err := embeddedetcd.PickURLs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	etcd, err := embeddedetcd.Start(context.Background(), embeddedetcd.Config{
		Dir: filepath.Join(dir, "etcd"), ClientURL: clientURL, PeerURL: peerURL,
		CertFile: files.EtcdServer.CertFile, KeyFile: files.EtcdServer.KeyFile, CAFile: files.CA.CertFile,
		// Benchmarks measure dispatch, not the disk.
		UnsafeNoFsync: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcd.Close()

	codec := scheme.Codecs.CodecForVersions(scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion), scheme.Codecs.UniversalDeserializer(), corev1.SchemeGroupVersion, corev1.SchemeGroupVersion)
	etcdConfig = *storagebackend.NewDefaultConfig("/registry", codec)
	etcdConfig.Transport = storagebackend.TransportConfig{
		ServerList: []string{etcd.ClientURL()},
		CertFile:   files.EtcdClient.CertFile, KeyFile: files.EtcdClient.KeyFile, TrustedCAFile: files.CA.CertFile,
	}
	tls, err := transport.TLSInfo{CertFile: files.EtcdClient.CertFile, KeyFile: files.EtcdClient.KeyFile, TrustedCAFile: files.CA.CertFile}.ClientConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	etcdClient, err = clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL()}, TLS: tls})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcdClient.Close()
	return m.Run()
}

// newConfigMapStorage builds tenant-keyed, cached configmap storage under resource
// prefix, as the server does for every resource.
func newConfigMapStorage(t testing.TB, resource string) (storage.Interface, *Prefixes) {
	t.Helper()
	prefixes := NewPrefixes()
	prefix := "/" + resource
	cfg := &storagebackend.ConfigForResource{Config: etcdConfig, GroupResource: corev1.Resource(resource)}
	s, destroy, err := Decorate(registry.StorageWithCacher(), prefixes)(cfg, prefix,
		func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc(prefix+"/", obj) },
		func() runtime.Object { return &corev1.ConfigMap{} },
		func() runtime.Object { return &corev1.ConfigMapList{} },
		storage.DefaultNamespaceScopedAttr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(destroy)
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return s.ReadinessCheck() == nil, nil
	})
	if err != nil {
		t.Fatalf("watch cache for %s not ready: %v", resource, s.ReadinessCheck())
	}
	return s, prefixes
}

func in(project string) context.Context {
	return tenancy.WithTenant(context.Background(), tenancy.ProjectTenant(project))
}

func create(t testing.TB, s storage.Interface, ctx context.Context, prefix, ns, name, value string) {
	t.Helper()
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": value}}
	if err := s.Create(ctx, prefix+"/"+ns+"/"+name, obj, &corev1.ConfigMap{}, 0); err != nil {
		t.Fatal(err)
	}
}

func list(t testing.TB, s storage.Interface, ctx context.Context, key, rv string) []corev1.ConfigMap {
	t.Helper()
	out := &corev1.ConfigMapList{}
	pred := storage.Everything
	pred.GetAttrs = storage.DefaultNamespaceScopedAttr
	if err := s.GetList(ctx, key, storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred}, out); err != nil {
		t.Fatal(err)
	}
	return out.Items
}

func etcdKeys(t testing.TB, prefix string) []string {
	t.Helper()
	resp, err := etcdClient.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

func TestKeysCarryTheTenant(t *testing.T) {
	s, _ := newConfigMapStorage(t, "keylayout")
	create(t, s, in("web"), "/keylayout", "default", "config", "web")
	create(t, s, in("api"), "/keylayout", "default", "config", "api")
	create(t, s, context.Background(), "/keylayout", "default", "config", "platform")
	got := strings.Join(etcdKeys(t, "/registry/keylayout/"), " ")
	want := "/registry/keylayout/_platform/default/config /registry/keylayout/api/default/config /registry/keylayout/web/default/config"
	if got != want {
		t.Fatalf("keys:\n %s\nwant\n %s", got, want)
	}
	for _, rv := range []string{"", "0"} {
		items := list(t, s, in("web"), "/keylayout", rv)
		if len(items) != 1 || items[0].Data["v"] != "web" || items[0].Annotations[tenancy.AnnotationKey] != "web" {
			t.Fatalf("web lists %v (rv %q)", items, rv)
		}
		platform := list(t, s, context.Background(), "/keylayout", rv)
		if len(platform) != 1 || platform[0].Data["v"] != "platform" || len(platform[0].Annotations) != 0 {
			t.Fatalf("platform lists %v (rv %q)", platform, rv)
		}
	}
	all := list(t, s, tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant), "/keylayout", "")
	if len(all) != 2 {
		t.Fatalf("all projects lists %d objects, want web's and api's", len(all))
	}
}

func TestPurgeRemovesEveryKeyOfTheProjectOnly(t *testing.T) {
	s, prefixes := newConfigMapStorage(t, "purgeme")
	for _, p := range []string{"doomed", "doomed-not", "kept"} {
		for i := range 3 {
			create(t, s, in(p), "/purgeme", fmt.Sprintf("ns-%d", i), "cm", p)
		}
	}
	create(t, s, context.Background(), "/purgeme", "doomed", "platform-object", "platform")

	deleted, err := Purge(context.Background(), etcdClient, prefixes, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 3 {
		t.Fatalf("purge deleted %d keys, want 3", deleted)
	}
	if keys := etcdKeys(t, "/registry/purgeme/doomed/"); len(keys) != 0 {
		t.Fatalf("keys of the purged project remain: %v", keys)
	}
	if n := len(etcdKeys(t, "/registry/purgeme/doomed-not/")); n != 3 {
		t.Fatalf("a project whose name extends the purged one lost keys: %d left", n)
	}
	if n := len(etcdKeys(t, "/registry/purgeme/_platform/doomed/")); n != 1 {
		t.Fatalf("the platform's namespace of the same name lost keys: %d left", n)
	}
	// The watch cache sees the deletions; a project of the same name starts empty.
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(list(t, s, in("doomed"), "/purgeme", "0")) == 0, nil
	})
	if err != nil {
		t.Fatalf("the cache still serves the purged project: %v", list(t, s, in("doomed"), "/purgeme", "0"))
	}
	create(t, s, in("doomed"), "/purgeme", "ns-0", "fresh", "new")
	if items := list(t, s, in("doomed"), "/purgeme", ""); len(items) != 1 || items[0].Name != "fresh" {
		t.Fatalf("the re-created project holds %v", items)
	}

	again, err := Purge(context.Background(), etcdClient, prefixes, "doomed")
	if err != nil || again != 1 {
		t.Fatalf("second purge: %d %v, want the one new key", again, err)
	}
	if _, err := Purge(context.Background(), etcdClient, prefixes, "_platform"); err == nil {
		t.Fatal("purge accepted the platform's segment")
	}
}

func TestAllProjectsViewCannotWrite(t *testing.T) {
	s, _ := newConfigMapStorage(t, "wildcardwrite")
	ctx := tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant)
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}
	if err := s.Create(ctx, "/wildcardwrite/default/x", obj, &corev1.ConfigMap{}, 0); err == nil {
		t.Fatal("create through the all-projects view succeeded")
	}
	if err := s.Get(ctx, "/wildcardwrite/default/x", storage.GetOptions{}, &corev1.ConfigMap{}); err == nil {
		t.Fatal("get through the all-projects view succeeded")
	}
}
