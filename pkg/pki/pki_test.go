package pki

import (
	"bytes"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	certutil "k8s.io/client-go/util/cert"
)

var loopbackNames = ServingNames{DNS: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	certs, err := certutil.CertsFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func TestEnsureCreatesAValidChain(t *testing.T) {
	dir := t.TempDir()
	f, err := Ensure(dir, loopbackNames)
	if err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, f.CA.CertFile)
	if !ca.IsCA {
		t.Fatal("ca.crt is not a CA")
	}
	for _, pair := range []KeyPair{f.Serving, f.Admin, f.EtcdServer, f.EtcdClient} {
		if err := readCert(t, pair.CertFile).CheckSignatureFrom(ca); err != nil {
			t.Errorf("%s is not signed by the CA: %v", pair.CertFile, err)
		}
		info, err := os.Stat(pair.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", pair.KeyFile, info.Mode().Perm())
		}
	}
	if err := readCert(t, f.FrontProxyClient.CertFile).CheckSignatureFrom(readCert(t, f.FrontProxyCA.CertFile)); err != nil {
		t.Errorf("front proxy client is not signed by the front proxy CA: %v", err)
	}
	if err := readCert(t, f.FrontProxyClient.CertFile).CheckSignatureFrom(ca); err == nil {
		t.Error("front proxy client must not chain to the client CA, or any client could assert identities in headers")
	}
	admin := readCert(t, f.Admin.CertFile)
	if admin.Subject.CommonName != AdminUser || !slices.Equal(admin.Subject.Organization, []string{AdminGroup}) {
		t.Errorf("admin subject = %v", admin.Subject)
	}
	serving := readCert(t, f.Serving.CertFile)
	if err := serving.VerifyHostname("localhost"); err != nil {
		t.Error(err)
	}
	if err := serving.VerifyHostname("127.0.0.1"); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(f.ServiceAccountKey); err != nil {
		t.Error(err)
	}
}

func TestEnsureReusesValidFiles(t *testing.T) {
	dir := t.TempDir()
	f, err := Ensure(dir, loopbackNames)
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	if _, err := Ensure(dir, loopbackNames); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, dir)
	for name, data := range before {
		if !bytes.Equal(data, after[name]) {
			t.Errorf("%s changed on a second Ensure", name)
		}
	}
	if len(after) != len(before) {
		t.Errorf("second Ensure changed the file set: %d → %d files", len(before), len(after))
	}
	_ = f
}

func TestEnsureReissuesServingCertForNewNames(t *testing.T) {
	dir := t.TempDir()
	f, err := Ensure(dir, loopbackNames)
	if err != nil {
		t.Fatal(err)
	}
	caBefore, _ := os.ReadFile(f.CA.CertFile)
	wider := ServingNames{DNS: []string{"localhost", "milo.example"}, IPs: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("192.0.2.10")}}
	if _, err := Ensure(dir, wider); err != nil {
		t.Fatal(err)
	}
	serving := readCert(t, f.Serving.CertFile)
	if err := serving.VerifyHostname("milo.example"); err != nil {
		t.Error(err)
	}
	if err := serving.VerifyHostname("192.0.2.10"); err != nil {
		t.Error(err)
	}
	caAfter, _ := os.ReadFile(f.CA.CertFile)
	if !bytes.Equal(caBefore, caAfter) {
		t.Error("the CA changed; clients holding the old one would stop trusting the server")
	}
}

func TestEnsureRepairsAMismatchedPair(t *testing.T) {
	dir := t.TempDir()
	f, err := Ensure(dir, loopbackNames)
	if err != nil {
		t.Fatal(err)
	}
	// As if a crash happened between writing a new key and its certificate.
	other, _ := os.ReadFile(f.EtcdClient.KeyFile)
	if err := os.WriteFile(f.Admin.KeyFile, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadPair(f.Admin); err == nil {
		t.Fatal("a mismatched pair loaded")
	}
	if _, err := Ensure(dir, loopbackNames); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadPair(f.Admin); err != nil {
		t.Fatalf("pair not repaired: %v", err)
	}
}

func TestWriteFileAtomicLeavesNoTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x")
	for _, content := range []string{"one", "two"} {
		if err := WriteFileAtomic(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want 1", len(entries))
	}
	data, _ := os.ReadFile(path)
	info, _ := os.Stat(path)
	if string(data) != "two" || info.Mode().Perm() != 0o640 {
		t.Fatalf("content %q mode %v", data, info.Mode().Perm())
	}
}

func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = data
	}
	return out
}
