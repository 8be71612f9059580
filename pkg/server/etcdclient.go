package server

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenantadmission"
)

// NewEtcdClient opens a client to the etcd t names (TLS when t has files):
// the server's own, for the operations that work on key ranges rather than
// objects, and the commands that work on a stopped server's storage.
func NewEtcdClient(t storagebackend.TransportConfig) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: t.ServerList, DialTimeout: 20 * time.Second}
	if t.CertFile != "" || t.KeyFile != "" || t.TrustedCAFile != "" {
		tls, err := transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile}.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
		cfg.TLS = tls
	}
	return clientv3.New(cfg)
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
