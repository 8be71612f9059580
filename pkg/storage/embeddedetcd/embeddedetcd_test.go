package embeddedetcd_test

import (
	"context"
	"crypto/tls"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
)

// With an HTTP URL the client URL serves gRPC alone (etcd's own transport)
// and the HTTP endpoints answer on the other port, both behind mutual TLS.
func TestClientURLServesGRPCAndHTTPURLTheRest(t *testing.T) {
	dir := t.TempDir()
	files, err := pki.Ensure(filepath.Join(dir, "pki"), pki.ServingNames{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	clientURL, httpURL, peerURL, err := embeddedetcd.PickURLs()
	if err != nil {
		t.Fatal(err)
	}
	if clientURL == httpURL || httpURL == peerURL || clientURL == peerURL {
		t.Fatalf("URLs not distinct: %s %s %s", clientURL.String(), httpURL.String(), peerURL.String())
	}
	s, err := embeddedetcd.Start(context.Background(), embeddedetcd.Config{Dir: filepath.Join(dir, "etcd"), ClientURL: clientURL, HTTPURL: httpURL, PeerURL: peerURL,
		CertFile: files.EtcdServer.CertFile, KeyFile: files.EtcdServer.KeyFile, CAFile: files.CA.CertFile, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	tlsConfig, err := transport.TLSInfo{CertFile: files.EtcdClient.CertFile, KeyFile: files.EtcdClient.KeyFile, TrustedCAFile: files.CA.CertFile}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, TLS: tlsConfig, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatalf("gRPC on the client URL: %v", err)
	}

	web := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	get := func(base string) (int, error) {
		resp, err := web.Get(base + "/health")
		if err != nil {
			return 0, err
		}
		resp.Body.Close() //nolint:errcheck
		return resp.StatusCode, nil
	}
	if code, err := get(httpURL.String()); err != nil || code != http.StatusOK {
		t.Fatalf("/health on the HTTP URL: %d, %v", code, err)
	}
	if code, err := get(s.ClientURL()); err == nil && code == http.StatusOK {
		t.Fatal("the client URL still serves HTTP: gRPC goes through the HTTP server's slow path")
	}
	// Without a client certificate nothing answers, on either port.
	bare, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, TLS: &tls.Config{RootCAs: tlsConfig.RootCAs, MinVersion: tls.VersionTLS12}, DialTimeout: 5 * time.Second})
	if err == nil {
		short, stop := context.WithTimeout(ctx, 5*time.Second)
		_, err = bare.Get(short, "/k")
		stop()
		bare.Close() //nolint:errcheck
	}
	if err == nil {
		t.Fatal("the client URL served gRPC without a client certificate")
	}
	noCert := &tls.Config{RootCAs: tlsConfig.RootCAs, MinVersion: tls.VersionTLS12}
	anonymous := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: noCert}}
	if resp, err := anonymous.Get(httpURL.String() + "/health"); err == nil {
		resp.Body.Close() //nolint:errcheck
		t.Fatalf("the HTTP URL answered %d without a client certificate", resp.StatusCode)
	}

	t.Run("reads in-process, writes over gRPC", func(t *testing.T) {
		overGRPC, inProcess := &countedKV{KV: c.KV}, &countedKV{KV: s.InProcessClient().KV}
		kv := embeddedetcd.ReadsInProcess(overGRPC, inProcess)
		put, err := kv.Put(ctx, "/reads/a", "1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Do(ctx, clientv3.OpPut("/reads/b", "2")); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Txn(ctx).Then(clientv3.OpPut("/reads/c", "3")).Commit(); err != nil {
			t.Fatal(err)
		}
		// Each read sees every write acknowledged on the other path.
		got, err := kv.Get(ctx, "/reads/", clientv3.WithPrefix())
		if err != nil || len(got.Kvs) != 3 || got.Kvs[0].ModRevision != put.Header.Revision {
			t.Fatalf("a read in-process found %v (%v), want the three keys written over gRPC", got.Kvs, err)
		}
		if did, err := kv.Do(ctx, clientv3.OpGet("/reads/b")); err != nil || len(did.Get().Kvs) != 1 {
			t.Fatalf("a read in-process did not find /reads/b: %v", err)
		}
		if _, err := kv.Delete(ctx, "/reads/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"put": 1, "do-put": 1, "txn": 1, "delete": 1}
		if !maps.Equal(overGRPC.calls, want) {
			t.Errorf("over gRPC: %v, want the writes %v", overGRPC.calls, want)
		}
		if want := map[string]int{"get": 1, "do-get": 1}; !maps.Equal(inProcess.calls, want) {
			t.Errorf("in-process: %v, want the reads %v", inProcess.calls, want)
		}
	})
}

// countedKV counts the calls of each kind it passes on to KV.
type countedKV struct {
	clientv3.KV
	calls map[string]int
}

func (c *countedKV) count(call string) {
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[call]++
}

func (c *countedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	c.count("put")
	return c.KV.Put(ctx, key, val, opts...)
}

func (c *countedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	c.count("get")
	return c.KV.Get(ctx, key, opts...)
}

func (c *countedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	c.count("delete")
	return c.KV.Delete(ctx, key, opts...)
}

func (c *countedKV) Txn(ctx context.Context) clientv3.Txn {
	c.count("txn")
	return c.KV.Txn(ctx)
}

func (c *countedKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	if op.IsGet() {
		c.count("do-get")
	} else {
		c.count("do-put")
	}
	return c.KV.Do(ctx, op)
}
