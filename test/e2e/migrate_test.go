package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

// upstreamEtcd starts an etcd for the test and returns a client and the
// flags that reach it.
func upstreamEtcd(t *testing.T, dir string) (*clientv3.Client, []string) {
	t.Helper()
	e, err := framework.StartEtcd(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.Client, []string{"--from-etcd", e.URL, "--from-etcd-cafile", e.Files.CA.CertFile,
		"--from-etcd-certfile", e.Files.EtcdClient.CertFile, "--from-etcd-keyfile", e.Files.EtcdClient.KeyFile}
}

// TestMigrateFromUpstreamLayout seeds an etcd the way upstream Milo stores
// two projects (each under /projects/<project>/, built-in kinds in
// protobuf, Milo's kinds in JSON), migrates it into a Milo data directory and
// into a PostgreSQL database, each twice (the second run writes nothing),
// leaves the source as it was, and serves every object at its project's URL,
// apart from the other's, from each.
func TestMigrateFromUpstreamLayout(t *testing.T) {
	dir := t.TempDir()
	source, from := upstreamEtcd(t, filepath.Join(dir, "upstream"))
	ctx := context.Background()
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	put := func(key string, obj runtime.Object) {
		t.Helper()
		var value []byte
		if u, ok := obj.(*unstructuredJSON); ok {
			value = u.data
		} else {
			var b bytes.Buffer
			if err := pb.Encode(obj, &b); err != nil {
				t.Fatal(err)
			}
			value = b.Bytes()
		}
		if _, err := source.Put(ctx, key, string(value)); err != nil {
			t.Fatal(err)
		}
	}
	typeMeta := func(kind string) metav1.TypeMeta { return metav1.TypeMeta{APIVersion: "v1", Kind: kind} }
	put("/registry/resourcemanager.miloapis.com/organizations/mig-org", jsonObject(t, map[string]any{"apiVersion": "resourcemanager.miloapis.com/v1alpha1",
		"kind": "Organization", "metadata": map[string]any{"name": "mig-org", "uid": "0a1b2c3d-0000-4000-8000-000000000001", "creationTimestamp": "2026-01-01T00:00:00Z"},
		"spec": map[string]any{"type": "Standard"}}))
	put("/registry/configmaps/default/platform-settings", &corev1.ConfigMap{TypeMeta: typeMeta("ConfigMap"),
		ObjectMeta: metav1.ObjectMeta{Name: "platform-settings", Namespace: "default"}, Data: map[string]string{"v": "platform"}})
	put("/registry/health", jsonObject(t, map[string]any{"health": "true"}))
	projects := []string{"mig-a", "mig-b"}
	for i, p := range projects {
		put("/registry/resourcemanager.miloapis.com/projects/"+p, jsonObject(t, map[string]any{"apiVersion": "resourcemanager.miloapis.com/v1alpha1",
			"kind": "Project", "metadata": map[string]any{"name": p, "uid": fmt.Sprintf("0a1b2c3d-0000-4000-8000-00000000001%d", i),
				"creationTimestamp": "2026-01-01T00:00:00Z", "labels": map[string]any{tenancy.OrganizationLabel: "mig-org"}},
			"spec": map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": "mig-org"}}}))
		base := "/projects/" + p + "/"
		for _, ns := range []string{"default", "app"} {
			put(base+"namespaces/"+ns, &corev1.Namespace{TypeMeta: typeMeta("Namespace"), ObjectMeta: metav1.ObjectMeta{Name: ns}})
		}
		for j := range 3 {
			name := fmt.Sprintf("cm-%d", j)
			put(base+"configmaps/app/"+name, &corev1.ConfigMap{TypeMeta: typeMeta("ConfigMap"),
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app"}, Data: map[string]string{"owner": p}})
		}
		put(base+"secrets/app/token", &corev1.Secret{TypeMeta: typeMeta("Secret"), ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: "app"},
			Data: map[string][]byte{"t": []byte(p)}})
		put(base+"events/app/something.1", &corev1.Event{TypeMeta: typeMeta("Event"), ObjectMeta: metav1.ObjectMeta{Name: "something.1", Namespace: "app"}})
	}
	before, err := source.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("data-dir", func(t *testing.T) {
		dataDir := filepath.Join(dir, "milo")
		migrateAndServe(t, source, before, from, []string{"--data-dir", dataDir}, dataDir)
	})
	for _, backend := range framework.SQLBackends {
		t.Run(backend, func(t *testing.T) {
			db := sqlDatabaseFor(t, backend, "milo_e2e_migrate")
			migrateAndServe(t, source, before, from, []string{"--storage-backend", db.URL}, t.TempDir(), "--storage-backend", db.URL)
		})
	}
}

// migrateAndServe migrates the source (holding the keys counted in before;
// from reaches it) into the target twice, checks the second run writes
// nothing and the source is as it was, then starts Milo on dataDir with
// startArgs and reads every project's objects at its URL.
func migrateAndServe(t *testing.T, source *clientv3.Client, before *clientv3.GetResponse, from, target []string, dataDir string, startArgs ...string) {
	ctx := context.Background()
	projects := []string{"mig-a", "mig-b"}
	migrate := func() string {
		t.Helper()
		out, err := exec.Command(miloBin, append(append([]string{"migrate"}, target...), from...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("milo migrate: %v\n%s", err, out)
		}
		return string(out)
	}
	// Per project: 2 namespaces, 3 ConfigMaps, a Secret; the platform: the
	// organization, 2 projects, a ConfigMap. Events and non-objects are skipped.
	if out := migrate(); !strings.Contains(out, "2 projects, 16 objects written, 0 already there, 3 keys skipped") {
		t.Fatalf("first migration:\n%s", out)
	}
	if out := migrate(); !strings.Contains(out, "2 projects, 0 objects written, 16 already there, 3 keys skipped") {
		t.Fatalf("second migration:\n%s", out)
	}
	after, err := source.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if after.Count != before.Count || after.Header.Revision != before.Header.Revision {
		t.Fatalf("the source changed: %d keys at revision %d, then %d at %d", before.Count, before.Header.Revision, after.Count, after.Header.Revision)
	}

	m, err := startMilo(dataDir, startArgs...)
	if err != nil {
		t.Fatal(err)
	}
	m.stopOnCleanup(t)
	for _, p := range projects {
		eventually(t, "project "+p+"'s objects at its URL", func() error {
			list, err := m.projectKube(t, p).CoreV1().ConfigMaps("app").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			own := ownConfigMaps(list.Items)
			if len(own) != 3 {
				return fmt.Errorf("%d ConfigMaps", len(own))
			}
			for _, cm := range own {
				if cm.Data["owner"] != p || cm.Annotations[tenancy.AnnotationKey] != p {
					return fmt.Errorf("%s in %s: %v %v", cm.Name, p, cm.Data, cm.Annotations)
				}
			}
			secret, err := m.projectKube(t, p).CoreV1().Secrets("app").Get(ctx, "token", metav1.GetOptions{})
			if err != nil || string(secret.Data["t"]) != p {
				return fmt.Errorf("secret: %v %v", secret, err)
			}
			return nil
		})
	}
	if cm, err := m.kube(t).CoreV1().ConfigMaps("default").Get(ctx, "platform-settings", metav1.GetOptions{}); err != nil || cm.Data["v"] != "platform" {
		t.Fatalf("the platform's ConfigMap: %v %v", cm, err)
	}
	m.waitProjectReady(t, "mig-a")
}

// unstructuredJSON is an object as JSON bytes, stored as they are.
type unstructuredJSON struct {
	runtime.Unknown
	data []byte
}

func jsonObject(t *testing.T, obj map[string]any) *unstructuredJSON {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructuredJSON{data: data}
}
