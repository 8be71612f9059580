package framework

import (
	"context"
	"net"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
)

// Etcd is an etcd a test runs for itself: the package Milo embeds, mutual
// TLS with certificates of its own, no fsync.
type Etcd struct {
	// Client reaches it with its client certificate.
	Client *clientv3.Client
	// URL is its client URL; Files its certificates.
	URL   string
	Files pki.Files
	etcd  *embeddedetcd.Server
}

// StartEtcd starts an etcd with its data and certificates under dir.
func StartEtcd(dir string) (*Etcd, error) {
	files, err := pki.Ensure(filepath.Join(dir, "pki"), pki.ServingNames{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		return nil, err
	}
	clientURL, httpURL, peerURL, err := embeddedetcd.PickURLs()
	if err != nil {
		return nil, err
	}
	s, err := embeddedetcd.Start(context.Background(), embeddedetcd.Config{Dir: filepath.Join(dir, "etcd"), ClientURL: clientURL, HTTPURL: httpURL, PeerURL: peerURL,
		CertFile: files.EtcdServer.CertFile, KeyFile: files.EtcdServer.KeyFile, CAFile: files.CA.CertFile, UnsafeNoFsync: true})
	if err != nil {
		return nil, err
	}
	tls, err := transport.TLSInfo{CertFile: files.EtcdClient.CertFile, KeyFile: files.EtcdClient.KeyFile, TrustedCAFile: files.CA.CertFile}.ClientConfig()
	if err == nil {
		var c *clientv3.Client
		if c, err = clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, TLS: tls, DialTimeout: 10 * time.Second}); err == nil {
			return &Etcd{Client: c, URL: s.ClientURL(), Files: files, etcd: s}, nil
		}
	}
	s.Close()
	return nil, err
}

// Close stops the client and the member.
func (e *Etcd) Close() {
	e.Client.Close()
	e.etcd.Close()
}
