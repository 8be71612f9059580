package tenantstorage

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes/scheme"

	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/storage/watchcache"
	"go.miloapis.com/milo/pkg/tenancy"
)

// One real etcd for the package, as the server runs it (TLS, loopback).
var (
	etcdConfig storagebackend.Config
	etcdClient *clientv3.Client
	keyRanges  keyranges.Store
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// The server fills its watch caches by paged lists, not streamed ones
	// (see pkg/server's disableWatchListReflectors): so do the tests'.
	// client-go reads its gates from the environment when first asked.
	os.Setenv("KUBE_FEATURE_"+string(clientfeatures.WatchListClient), "false")
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
	clientURL, httpURL, peerURL, err := embeddedetcd.PickURLs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	etcd, err := embeddedetcd.Start(context.Background(), embeddedetcd.Config{
		Dir: filepath.Join(dir, "etcd"), ClientURL: clientURL, HTTPURL: httpURL, PeerURL: peerURL,
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
	keyRanges = keyranges.Etcd(etcdClient)
	return m.Run()
}

// fillPageSize is the page the tests' watch caches fill in: small, so that
// a cache filled from what etcd already holds reads several pages.
const fillPageSize = 2

// newConfigMapStorage builds tenant-keyed, cached configmap storage under resource
// prefix, as the server does for every resource.
func newConfigMapStorage(t testing.TB, resource string) (storage.Interface, *Prefixes) {
	return newShownStorage(t, resource, nil)
}

// newShownStorage is newConfigMapStorage whose all-projects view shows what
// shown allows.
func newShownStorage(t testing.TB, resource string, shown Shown) (storage.Interface, *Prefixes) {
	return newStorage(t, resource, Options{Shown: shown})
}

// newStorage is newConfigMapStorage with options o (its Prefixes made here).
func newStorage(t testing.TB, resource string, o Options) (storage.Interface, *Prefixes) {
	t.Helper()
	return newStorageOf(t, resource, o, etcdConfig)
}

// newStorageOf is newStorage over the storage config c.
func newStorageOf(t testing.TB, resource string, o Options, c storagebackend.Config) (storage.Interface, *Prefixes) {
	t.Helper()
	return newCachedStorage(t, resource, o, c, watchcache.Options{PageSize: fillPageSize})
}

// emptied are the top-level tests (and benchmarks) whose run has emptied
// the package's etcd.
var emptied sync.Map

// startEmpty empties the package's etcd at the first storage a test
// builds, once per run of the test: the tests share one etcd and many
// name their objects and tallies, which a test run again in the same
// process (-count) would otherwise find stored by its last run. A test
// builds its first storage before it writes to etcd itself, and before
// its subtests (whose own first storage would empty etcd again), and no
// test runs in parallel with another.
func startEmpty(t testing.TB) {
	top, _, _ := strings.Cut(t.Name(), "/")
	if _, done := emptied.LoadOrStore(top, true); done {
		return
	}
	t.Cleanup(func() { emptied.Delete(top) })
	if _, err := etcdClient.Delete(context.Background(), "/registry/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// newCachedStorage is newStorageOf whose watch cache w shapes.
func newCachedStorage(t testing.TB, resource string, o Options, c storagebackend.Config, w watchcache.Options) (storage.Interface, *Prefixes) {
	t.Helper()
	startEmpty(t)
	o.Prefixes = NewPrefixes()
	prefix := "/" + resource
	cfg := &storagebackend.ConfigForResource{Config: c, GroupResource: corev1.Resource(resource)}
	s, destroy, err := Decorate(watchcache.Decorator(w), o)(cfg, prefix,
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
	return s, o.Prefixes
}

// idOf is the storage id the tests give a project: one made from a UID.
func idOf(project string) string { return tenancy.ProjectID("uid-of-" + project) }

func in(project string) context.Context {
	return tenancy.WithTenant(context.Background(), tenancy.Tenant{Kind: tenancy.Project, Name: project, ID: idOf(project)})
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
	want := "/registry/keylayout/_platform/default/config /registry/keylayout/p.uid-of-api/default/config /registry/keylayout/p.uid-of-web/default/config"
	if got != want {
		t.Fatalf("keys:\n %s\nwant\n %s", got, want)
	}
	for _, rv := range []string{"", "0"} {
		items := list(t, s, in("web"), "/keylayout", rv)
		if len(items) != 1 || items[0].Data["v"] != "web" || items[0].Annotations[tenancy.AnnotationKey] != "web" || items[0].Annotations[tenancy.IDAnnotationKey] != idOf("web") {
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

// A watch cache filled from what storage holds (a restart) holds every
// object of every page, each in its tenant, names alike in two projects too.
func TestCacheFilledInPagesHoldsEveryObject(t *testing.T) {
	s, _ := newConfigMapStorage(t, "filled")
	for i := range 5 {
		create(t, s, in("web"), "/filled", "default", fmt.Sprintf("config-%d", i), "web")
	}
	for i := range 2 {
		create(t, s, in("api"), "/filled", "default", fmt.Sprintf("config-%d", i), "api")
	}
	create(t, s, context.Background(), "/filled", "default", "platform", "platform")
	// A second storage of the resource has a cache of its own, filled from
	// etcd's eight keys in pages of two.
	restarted, _ := newConfigMapStorage(t, "filled")
	for project, want := range map[string]int{"web": 5, "api": 2} {
		items := list(t, restarted, in(project), "/filled", "0")
		if len(items) != want {
			t.Errorf("%s's objects in the filled cache: %d, want %d", project, len(items), want)
		}
		for _, item := range items {
			if item.Data["v"] != project {
				t.Errorf("%s's list from the filled cache holds %s/%s of %s", project, item.Namespace, item.Name, item.Data["v"])
			}
		}
	}
	if all := list(t, restarted, tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant), "/filled", "0"); len(all) != 7 {
		t.Errorf("the all-projects view of the filled cache lists %d objects, want 7", len(all))
	}
	if platform := list(t, restarted, context.Background(), "/filled", "0"); len(platform) != 1 {
		t.Errorf("the platform's objects in the filled cache: %d, want 1", len(platform))
	}
}

// skewed answers storage's keys and revisions as revisions does, except
// that key is written one revision later, or missing if drop, or followed
// by key+"-extra" if extra.
type skewed struct {
	watchcache.Revisions
	key         string
	drop, extra bool
}

func (s skewed) KeyRevisions(ctx context.Context, start, end string, revision, pageSize int64, f func(string, int64) error) error {
	added := s.key + "-extra"
	pending := s.extra && start <= added && added < end
	err := s.Revisions.KeyRevisions(ctx, start, end, revision, pageSize, func(key string, written int64) error {
		if pending && added < key {
			pending = false
			if err := f(added, revision); err != nil {
				return err
			}
		}
		switch {
		case key != s.key || s.extra:
			return f(key, written)
		case s.drop:
			return nil
		default:
			return f(key, written+1)
		}
	})
	if err == nil && pending {
		err = f(added, revision)
	}
	return err
}

// The watch cache is checked against etcd's keys and revisions: a cache
// holding two projects' objects of the same names, written, rewritten and
// deleted, is found to hold what etcd holds; one that storage answers
// differently for (a key at another revision, a key missing) is found apart.
func TestCacheCheckedAgainstStorageKeys(t *testing.T) {
	checkedWith := func(resource string, revisions watchcache.Revisions) (storage.Interface, <-chan error) {
		outcomes := make(chan error, 1)
		s, _ := newCachedStorage(t, resource, Options{TenancyMaps: NewTenancyMaps()}, etcdConfig, watchcache.Options{
			PageSize: fillPageSize, Revisions: revisions, CheckPeriod: 20 * time.Millisecond,
			// Chunks of two objects: the six objects of fill are compared
			// with three reads of storage's keys.
			CheckChunk: 2,
			Checked: func(_ schema.GroupResource, err error) {
				select {
				case outcomes <- err:
				default: // a check the test does not wait for
				}
			},
		})
		return s, outcomes
	}
	next := func(t *testing.T, outcomes <-chan error) error {
		t.Helper()
		select {
		case err := <-outcomes:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("no check of the cache in 30 s")
			return nil
		}
	}
	fill := func(t *testing.T, s storage.Interface, resource string) {
		for _, p := range []string{"web", "api"} {
			for i := range 3 {
				create(t, s, in(p), "/"+resource, "default", fmt.Sprintf("config-%d", i), p)
			}
		}
		create(t, s, context.Background(), "/"+resource, "default", "config-0", "platform")
		if err := s.Delete(in("web"), "/"+resource+"/default/config-1", &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.GuaranteedUpdate(in("api"), "/"+resource+"/default/config-2", &corev1.ConfigMap{}, false, nil,
			func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
				cm := input.(*corev1.ConfigMap).DeepCopy()
				cm.Data["v"] = "rewritten"
				return cm, nil, nil
			}, nil); err != nil {
			t.Fatal(err)
		}
	}

	s, outcomes := checkedWith("checked", keyRanges)
	fill(t, s, "checked")
	// Checks that began before the writes may have been answered already:
	// every one from now on is of a cache holding all of them.
	next(t, outcomes)
	for range 3 {
		if err := next(t, outcomes); err != nil {
			t.Fatalf("a consistent cache failed its check: %v", err)
		}
	}
	// etcd compacted past the cache's last event (nobody wrote the
	// resource since): the cache is checked at etcd's revision, not its own.
	ctx := context.Background()
	if err := keyRanges.Put(ctx, "/registry/checked-elsewhere/x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	written, _, err := keyRanges.Get(ctx, "/registry/checked-elsewhere/x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcdClient.Compact(ctx, written.Revision); err != nil {
		t.Fatal(err)
	}
	next(t, outcomes)
	for range 2 {
		if err := next(t, outcomes); err != nil {
			t.Fatalf("the check of a cache idle since before etcd's compaction: %v", err)
		}
	}

	webKey := "/registry/checked-apart/" + idOf("web") + "/default/config-0"
	for _, tc := range []struct {
		name string
		skew skewed
		want string
	}{
		{"a key at another revision", skewed{Revisions: keyRanges, key: webKey}, webKey},
		{"a key missing", skewed{Revisions: keyRanges, key: webKey, drop: true}, webKey},
		{"a key the cache does not hold", skewed{Revisions: keyRanges, key: webKey, extra: true}, webKey + "-extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, outcomes := checkedWith("checked-apart", tc.skew)
			fill(t, s, "checked-apart")
			// Checks of the cache before the key was written pass, and one
			// before it was filled could not run.
			var err error
			for deadline := time.Now().Add(30 * time.Second); err == nil || !strings.Contains(err.Error(), "inconsistent"); {
				if time.Now().After(deadline) {
					t.Fatalf("no check found the cache apart from a storage that answers differently for %s; the last: %v", tc.want, err)
				}
				err = next(t, outcomes)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the check of a cache storage answers differently for %s: %v", tc.want, err)
			}
			// The next test's objects start from an empty range.
			if _, err := keyRanges.DeletePrefixes(context.Background(), "/registry/checked-apart/"); err != nil {
				t.Fatal(err)
			}
		})
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

	deleted, err := Purge(context.Background(), keyRanges, prefixes, idOf("doomed"))
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 3 {
		t.Fatalf("purge deleted %d keys, want 3", deleted)
	}
	if keys := etcdKeys(t, "/registry/purgeme/"+idOf("doomed")+"/"); len(keys) != 0 {
		t.Fatalf("keys of the purged project remain: %v", keys)
	}
	if n := len(etcdKeys(t, "/registry/purgeme/"+idOf("doomed-not")+"/")); n != 3 {
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

	again, err := Purge(context.Background(), keyRanges, prefixes, idOf("doomed"))
	if err != nil || again != 1 {
		t.Fatalf("second purge: %d %v, want the one new key", again, err)
	}
	for _, bad := range []string{"_platform", tenancy.UnresolvedSegment, "", "p.", "p.a/b", "../x"} {
		if _, err := Purge(context.Background(), keyRanges, prefixes, bad); err == nil {
			t.Fatalf("purge accepted %q", bad)
		}
	}
}

func TestStoredByResourceCountsOneProject(t *testing.T) {
	s, prefixes := newConfigMapStorage(t, "countme")
	for i := range 3 {
		create(t, s, in("counted"), "/countme", fmt.Sprintf("ns-%d", i), "cm", "x")
	}
	create(t, s, in("counted-not"), "/countme", "ns-0", "cm", "x")
	create(t, s, context.Background(), "/countme", "counted", "platform-object", "platform")

	for project, want := range map[string]int64{"counted": 3, "counted-not": 1, "empty": 0} {
		got, revision, err := StoredByResource(context.Background(), keyRanges, prefixes, idOf(project), []schema.GroupResource{corev1.Resource("countme"), corev1.Resource("unknown"), corev1.Resource("countme")})
		if err != nil {
			t.Fatal(err)
		}
		if revision <= 0 {
			t.Errorf("project %s: counted at revision %d", project, revision)
		}
		if n, ok := got[corev1.Resource("countme")]; !ok || n != want || len(got) != 1 {
			t.Errorf("project %s: %v, want countme: %d and nothing for a resource without storage", project, got, want)
		}
	}
	for _, bad := range []string{"_platform", tenancy.UnresolvedSegment, "", "p.a/b"} {
		if _, _, err := StoredByResource(context.Background(), keyRanges, prefixes, bad, []schema.GroupResource{corev1.Resource("countme")}); err == nil {
			t.Errorf("counting accepted %q", bad)
		}
	}
}

// TestStoredObjectsByProjectCountsEveryProject: the pass over a resource,
// cut into ranges at the known projects' ids, counts every project's objects
// exactly, those of projects it was not told of included, and nothing of the
// platform's.
func TestStoredObjectsByProjectCountsEveryProject(t *testing.T) {
	s, prefixes := newConfigMapStorage(t, "countall")
	const projects = 2*idsPerRange + 50 // three ranges
	want := map[string]int64{}
	var known []string
	for i := range projects {
		project := fmt.Sprintf("all-%03d", i)
		for k := range i % 3 {
			create(t, s, in(project), "/countall", "default", fmt.Sprintf("cm-%d", k), "x")
			want[idOf(project)]++
		}
		if i%2 == 0 {
			known = append(known, idOf(project))
		}
	}
	create(t, s, context.Background(), "/countall", "kube-system", "platform-object", "platform")
	got, err := StoredObjectsByProject(context.Background(), keyRanges, prefixes, known)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("counted %d projects, want %d; first differences: %v", len(got), len(want), firstDifferences(got, want))
	}
	if got, err := StoredObjectsByProject(context.Background(), keyRanges, prefixes, nil); err != nil || !maps.Equal(got, want) {
		t.Fatalf("without ids: %d projects, %v", len(got), err)
	}
}

func firstDifferences(got, want map[string]int64) []string {
	var out []string
	for id, n := range want {
		if got[id] != n && len(out) < 5 {
			out = append(out, fmt.Sprintf("%s: %d, want %d", id, got[id], n))
		}
	}
	return out
}

// A project created with the name of a deleted one gets a new storage id, so
// it starts empty even when the old one's keys were never purged, and its
// watchers never see the old one's objects.
func TestRecycledNameStartsEmpty(t *testing.T) {
	s, _ := newConfigMapStorage(t, "recycled")
	old := tenancy.WithTenant(context.Background(), tenancy.Tenant{Kind: tenancy.Project, Name: "victim", ID: tenancy.ProjectID("old-uid")})
	create(t, s, old, "/recycled", "default", "grant", "attacker's")
	recycled := tenancy.WithTenant(context.Background(), tenancy.Tenant{Kind: tenancy.Project, Name: "victim", ID: tenancy.ProjectID("new-uid")})
	for _, rv := range []string{"", "0"} {
		if items := list(t, s, recycled, "/recycled", rv); len(items) != 0 {
			t.Fatalf("the new project of a recycled name lists the old one's objects (rv %q): %v", rv, items)
		}
	}
	if err := s.Get(recycled, "/recycled/default/grant", storage.GetOptions{}, &corev1.ConfigMap{}); err == nil {
		t.Fatal("the new project reads the old one's object")
	}
	w, err := s.Watch(recycled, "/recycled", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	create(t, s, old, "/recycled", "default", "later", "old")
	create(t, s, recycled, "/recycled", "default", "mine", "new")
	ev := nextEvent(w)
	if eventName(ev) != "mine" {
		t.Fatalf("the new project's watch saw %s %v first, want only its own object", ev.Type, ev.Object)
	}
}

// A project the router has not resolved reads nothing and writes nowhere.
func TestUnresolvedProjectHasNoStorage(t *testing.T) {
	s, _ := newConfigMapStorage(t, "unresolved")
	ctx := tenancy.WithTenant(context.Background(), tenancy.ProjectTenant("ghost"))
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}
	if err := s.Create(ctx, "/unresolved/default/x", obj, &corev1.ConfigMap{}, 0); err == nil {
		t.Fatal("create in an unresolved project succeeded")
	}
	create(t, s, in("real"), "/unresolved", "default", "x", "real")
	if items := list(t, s, ctx, "/unresolved", ""); len(items) != 0 {
		t.Fatalf("an unresolved project lists %v", items)
	}
	if keys := etcdKeys(t, "/registry/unresolved/"+tenancy.UnresolvedSegment); len(keys) != 0 {
		t.Fatalf("keys under the unresolved segment: %v", keys)
	}
}

// The tenant annotations are the server's: a platform object claiming a
// project's id is stored and indexed as the platform's, and a project's object
// claiming another project's id as its own project's.
func TestClientCannotClaimAnotherTenantsID(t *testing.T) {
	s, _ := newConfigMapStorage(t, "claims")
	w, err := s.Watch(in("victim"), "/claims", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	forged := map[string]string{tenancy.AnnotationKey: "victim", tenancy.IDAnnotationKey: idOf("victim")}
	for _, ctx := range []context.Context{context.Background(), in("attacker")} {
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "forged", Annotations: forged}}
		if err := s.Create(ctx, "/claims/default/forged", obj, &corev1.ConfigMap{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(etcdKeys(t, "/registry/claims/"), " ")
	if want := "/registry/claims/_platform/default/forged /registry/claims/" + idOf("attacker") + "/default/forged"; got != want {
		t.Fatalf("keys %s, want %s", got, want)
	}
	if items := list(t, s, in("victim"), "/claims", "0"); len(items) != 0 {
		t.Fatalf("the victim lists forged objects: %v", items)
	}
	create(t, s, in("victim"), "/claims", "default", "own", "victim")
	ev := nextEvent(w)
	if eventName(ev) != "own" {
		t.Fatalf("the victim's watch saw %v first, want only its own object", ev.Object)
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

// eventName is the name of the object of ev (the cache wraps objects).
func eventName(ev watch.Event) string {
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return ""
	}
	return m.GetName()
}

// nextEvent returns the next event of w that is not a bookmark.
func nextEvent(w watch.Interface) watch.Event {
	for ev := range w.ResultChan() {
		if ev.Type != watch.Bookmark {
			return ev
		}
	}
	return watch.Event{}
}

// TestPurgeTakesFurtherPrefixes: the resources of a project's own CRDs, whose
// storage the server may not have built since it started, are purged when
// named, and only the project's keys of them.
func TestPurgeTakesFurtherPrefixes(t *testing.T) {
	ctx := context.Background()
	id, other := idOf("with-crds"), idOf("with-crds-too")
	for _, k := range []string{"/registry/crd.example.net/things/" + id + "/default/a", "/registry/crd.example.net/things/" + id + "/b",
		"/registry/crd.example.net/things/" + other + "/default/a"} {
		if _, err := etcdClient.Put(ctx, k, "{}"); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := Purge(ctx, keyRanges, NewPrefixes(), id, "/registry/crd.example.net/things")
	if err != nil || deleted != 2 {
		t.Fatalf("purge: %d keys, %v; want the project's 2", deleted, err)
	}
	if keys := etcdKeys(t, "/registry/crd.example.net/things/"); len(keys) != 1 || !strings.Contains(keys[0], other) {
		t.Fatalf("keys left: %v, want the other project's", keys)
	}
}
