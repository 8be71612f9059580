// Command baseline runs the floor Milo is measured against: Kubernetes' own
// sample generic control plane (k8s.io/kubernetes/pkg/controlplane/apiserver/
// samples/generic/server), with no tenancy at all, in one process with an
// embedded etcd configured as Milo's is. The scale harness stores each
// "project" in it as a plain namespace.
//
//	baseline --data-dir DIR --secure-port PORT
//
// It writes DIR/token (a bearer token of group system:masters) and serves on
// 127.0.0.1 with the certificate of DIR/pki/ca.crt.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"k8s.io/kubernetes/pkg/controlplane/apiserver/samples/generic/server"

	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
)

// Token is the bearer token the harness uses; it is only served on loopback.
const Token = "baseline-admin-token"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data-dir", "", "directory for etcd data, certificates and the token")
	port := flag.Int("secure-port", 0, "port on 127.0.0.1")
	flag.Parse()
	if *dataDir == "" || *port == 0 {
		return fmt.Errorf("--data-dir and --secure-port are required")
	}
	files, err := pki.Ensure(filepath.Join(*dataDir, "pki"), pki.ServingNames{DNS: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		return err
	}
	tokens := filepath.Join(*dataDir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(Token+",baseline-admin,baseline-admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dataDir, "token"), []byte(Token), 0o600); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	clientURL, peerURL, err := embeddedetcd.PickURLs()
	if err != nil {
		return err
	}
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Config{Dir: filepath.Join(*dataDir, "etcd"), ClientURL: clientURL, PeerURL: peerURL,
		CertFile: files.EtcdServer.CertFile, KeyFile: files.EtcdServer.KeyFile, CAFile: files.CA.CertFile})
	if err != nil {
		return err
	}
	defer etcd.Close()

	url := "https://127.0.0.1:" + strconv.Itoa(*port)
	cmd := server.NewCommand()
	cmd.SetArgs([]string{
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(*port),
		"--tls-cert-file=" + files.Serving.CertFile, "--tls-private-key-file=" + files.Serving.KeyFile,
		"--client-ca-file=" + files.CA.CertFile, "--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--etcd-servers=" + etcd.ClientURL(), "--etcd-cafile=" + files.CA.CertFile,
		"--etcd-certfile=" + files.EtcdClient.CertFile, "--etcd-keyfile=" + files.EtcdClient.KeyFile,
		"--service-account-key-file=" + files.ServiceAccountKey, "--service-account-signing-key-file=" + files.ServiceAccountKey,
		"--service-account-issuer=" + url,
	})
	// The command stops on SIGTERM itself (its signal context); etcd closes after it.
	return cmd.Execute()
}
