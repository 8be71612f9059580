// Command baseline runs the floor Milo is measured against: Kubernetes' own
// sample generic control plane (k8s.io/kubernetes/pkg/controlplane/apiserver/
// samples/generic/server), with no tenancy at all, in one process with an
// embedded etcd configured as Milo's is. The scale harness stores each
// "project" in it as a plain namespace.
//
//	baseline --data-dir DIR --secure-port PORT
//	baseline controller-manager --data-dir DIR --secure-port PORT
//
// The server writes DIR/token (a bearer token of group system:masters) and
// DIR/controller-manager.kubeconfig (the same identity), and serves on
// 127.0.0.1 with the certificate of DIR/pki/ca.crt.
//
// The controller-manager subcommand runs upstream kube-controller-manager
// (k8s.io/kubernetes/cmd/kube-controller-manager/app) as its own process
// against that server, with the controllers Milo runs for every project
// (Controllers), leader election off, signing service account tokens with the
// server's key and publishing DIR/pki/ca.crt as kube-root-ca.crt. It serves
// /healthz, /readyz, /metrics and /debug/pprof on https://127.0.0.1:PORT to
// anyone (loopback only), so the harness can read its heap and goroutines.
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

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/pkg/controlplane/apiserver/samples/generic/server"

	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
)

// Token is the bearer token the harness uses; it is only served on loopback.
const Token = "baseline-admin-token"

// Controllers are the kube-controller-manager controllers the baseline runs:
// those Milo runs for every project (namespace, garbage-collector,
// serviceaccount, serviceaccount-token, resourcequota,
// root-ca-certificate-publisher, clusterrole-aggregation), by the names
// kube-controller-manager 1.36 knows them (the short ones are not all aliases).
const Controllers = "namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,resourcequota-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller"

// kubeconfigName is the controller manager's kubeconfig in the data directory.
const kubeconfigName = "controller-manager.kubeconfig"

func main() {
	run := runServer
	if len(os.Args) > 1 && os.Args[1] == "controller-manager" {
		run = runControllerManager
		os.Args = append(os.Args[:1], os.Args[2:]...)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
}

// runControllerManager runs kube-controller-manager against the server whose
// data directory is --data-dir, until SIGTERM.
func runControllerManager() error {
	dataDir := flag.String("data-dir", "", "data directory of the baseline server")
	port := flag.Int("secure-port", 0, "port on 127.0.0.1 for /healthz, /metrics and /debug/pprof")
	flag.Parse()
	if *dataDir == "" || *port == 0 {
		return fmt.Errorf("--data-dir and --secure-port are required")
	}
	kubeconfig := filepath.Join(*dataDir, kubeconfigName)
	if _, err := os.Stat(kubeconfig); err != nil {
		return fmt.Errorf("the server has not written its kubeconfig yet: %w", err)
	}
	files := pki.Layout(filepath.Join(*dataDir, "pki"))
	cmd := kcm.NewControllerManagerCommand()
	cmd.SetArgs([]string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + Controllers,
		"--leader-elect=false",
		"--service-account-private-key-file=" + files.ServiceAccountKey,
		"--root-ca-file=" + files.CA.CertFile,
		// Milo's controllers have no client-side rate limit either.
		"--kube-api-qps=100000", "--kube-api-burst=100000",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(*port),
		// No authentication or authorization kubeconfig: the endpoints the
		// harness reads are open to anonymous requests, on loopback.
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof/*",
	})
	return cmd.Execute()
}

func runServer() error {
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
	// The same member as Milo's embedded one, gRPC apart from HTTP.
	clientURL, httpURL, peerURL, err := embeddedetcd.PickURLs()
	if err != nil {
		return err
	}
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Config{Dir: filepath.Join(*dataDir, "etcd"), ClientURL: clientURL, HTTPURL: httpURL, PeerURL: peerURL,
		CertFile: files.EtcdServer.CertFile, KeyFile: files.EtcdServer.KeyFile, CAFile: files.CA.CertFile})
	if err != nil {
		return err
	}
	defer etcd.Close()

	url := "https://127.0.0.1:" + strconv.Itoa(*port)
	if err := writeKubeconfig(filepath.Join(*dataDir, kubeconfigName), url, files.CA.CertFile); err != nil {
		return err
	}
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

// writeKubeconfig writes a kubeconfig of the system:masters token for url.
func writeKubeconfig(path, url, caFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["baseline"] = &clientcmdapi.Cluster{Server: url, CertificateAuthority: caFile}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: Token}
	cfg.Contexts["baseline"] = &clientcmdapi.Context{Cluster: "baseline", AuthInfo: "admin"}
	cfg.CurrentContext = "baseline"
	return clientcmd.WriteToFile(*cfg, path)
}
