package kubeconfig

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"go.miloapis.com/milo/pkg/pki"
)

func TestClientCertKubeconfigEmbedsCredentials(t *testing.T) {
	dir := t.TempDir()
	files, err := pki.Ensure(filepath.Join(dir, "pki"), pki.ServingNames{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "admin.kubeconfig")
	kc := ClientCert{Name: "milo-admin", Server: "https://127.0.0.1:6443", CAFile: files.CA.CertFile, CertFile: files.Admin.CertFile, KeyFile: files.Admin.KeyFile}
	if err := kc.Write(path); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600: it holds a private key", info.Mode().Perm())
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("host %q", cfg.Host)
	}
	ca, _ := os.ReadFile(files.CA.CertFile)
	cert, _ := os.ReadFile(files.Admin.CertFile)
	if !bytes.Equal(cfg.CAData, ca) || !bytes.Equal(cfg.CertData, cert) || len(cfg.KeyData) == 0 {
		t.Error("credentials are not embedded")
	}
	if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
		t.Error("kubeconfig refers to files; it would break when copied elsewhere")
	}
}

func TestBuildReportsMissingFiles(t *testing.T) {
	_, err := ClientCert{Name: "x", Server: "https://127.0.0.1:1", CAFile: "/nonexistent/ca.crt"}.Build()
	if err == nil {
		t.Fatal("Build succeeded without a CA file")
	}
}
