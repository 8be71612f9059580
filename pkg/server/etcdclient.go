package server

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenantadmission"
)

// newEtcdClient opens Milo's own client to the API server's etcd, for the
// operations that work on key ranges rather than objects: counting a project's
// objects for quota, and purging a project's keys.
func newEtcdClient(t storagebackend.TransportConfig) (*clientv3.Client, error) {
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

// objectCounter counts a project's objects by etcd key prefix.
func objectCounter(client *clientv3.Client, prefixes *tenantstorage.Prefixes) tenantadmission.ObjectCounter {
	return func(ctx context.Context, resource schema.GroupResource, projectID, namespace string) (int64, error) {
		return tenantstorage.CountInNamespace(ctx, client, prefixes, resource, projectID, namespace)
	}
}

// objectExists looks a project's object up by key.
func objectExists(client *clientv3.Client, prefixes *tenantstorage.Prefixes) tenantadmission.ObjectExists {
	return func(ctx context.Context, resource schema.GroupResource, projectID, namespace, name string) (bool, error) {
		return tenantstorage.ExistsInNamespace(ctx, client, prefixes, resource, projectID, namespace, name)
	}
}
