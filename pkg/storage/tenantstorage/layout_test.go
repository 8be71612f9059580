package tenantstorage

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"go.miloapis.com/milo/pkg/tenancy"
)

// A data directory written before storage ids: its projects keep their names
// as ids (so their objects stay where they are), projects created afterwards
// do not get one, and running the upgrade again changes nothing.
func TestUpgradeLayoutKeepsOldProjectsWhereTheyAre(t *testing.T) {
	ctx := context.Background()
	const prefix = "/upgrade"
	key := func(name string) string { return prefix + "/" + projectsKeyPrefix + name }
	// From an empty prefix, also when the test runs again (-count).
	if _, err := etcdClient.Delete(ctx, prefix+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	old := `{"apiVersion":"resourcemanager.miloapis.com/v1alpha1","kind":"Project","metadata":{"name":"web","uid":"1111","generation":9007199254740993,"annotations":{"keep":"me"}},"spec":{"ownerRef":{"kind":"Organization","name":"acme"}}}`
	if _, err := etcdClient.Put(ctx, key("web"), old); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdClient.Put(ctx, key("api"), `{"apiVersion":"resourcemanager.miloapis.com/v1alpha1","kind":"Project","metadata":{"name":"api","uid":"2222"}}`); err != nil {
		t.Fatal(err)
	}
	if err := UpgradeLayout(ctx, keyRanges, prefix); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "api"} {
		obj := read(t, key(name))
		if id := tenancy.StorageIDOf(obj); id != name {
			t.Fatalf("project %s has storage id %q after the upgrade, want its name", name, id)
		}
	}
	web := read(t, key("web"))
	if web.GetAnnotations()["keep"] != "me" || web.GetGeneration() != 9007199254740993 {
		t.Fatalf("the upgrade changed more than the annotation: %v", web)
	}

	// Created after the upgrade: stored under its UID, and left alone by a second run.
	if _, err := etcdClient.Put(ctx, key("fresh"), `{"apiVersion":"resourcemanager.miloapis.com/v1alpha1","kind":"Project","metadata":{"name":"fresh","uid":"3333"}}`); err != nil {
		t.Fatal(err)
	}
	if err := UpgradeLayout(ctx, keyRanges, prefix); err != nil {
		t.Fatal(err)
	}
	if id := tenancy.StorageIDOf(read(t, key("fresh"))); id != tenancy.ProjectID("3333") {
		t.Fatalf("a project created after the upgrade has storage id %q", id)
	}
	if _, err := etcdClient.Put(ctx, prefix+"/"+layoutKey, "99"); err != nil {
		t.Fatal(err)
	}
	if err := UpgradeLayout(ctx, keyRanges, prefix); err == nil {
		t.Fatal("an unknown layout version was accepted")
	}
}

func read(t *testing.T, key string) *unstructured.Unstructured {
	t.Helper()
	resp, err := etcdClient.Get(context.Background(), key, clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("reading %s: %v", key, err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(resp.Kvs[0].Value); err != nil {
		t.Fatal(err)
	}
	return obj
}
