// Package pki creates, and on later starts reuses, the certificate authorities,
// certificates and keys an all-in-one Milo keeps in its data directory.
//
// Every file is written atomically (temporary file, fsync, rename), so an
// interrupted start leaves either the old file or the new one, never a torn one.
// Existing material is reused as long as it is valid: signed by the current CA,
// not close to expiry, and (for serving certificates) covering every name asked for.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// renewBefore makes a start regenerate a leaf certificate that would expire soon,
	// so a server restarted now and then never runs into an expired certificate.
	renewBefore = 30 * 24 * time.Hour
)

// KeyPair names a certificate file and its private key file.
type KeyPair struct {
	CertFile string
	KeyFile  string
}

// Files is every path of Milo's generated PKI, all under one directory.
type Files struct {
	// CA signs the serving, admin and etcd certificates and verifies client certificates.
	CA KeyPair
	// Serving is the API server's TLS certificate.
	Serving KeyPair
	// Admin is the client certificate of admin.kubeconfig (group system:masters).
	Admin KeyPair
	// EtcdServer is the embedded etcd's serving and peer certificate.
	EtcdServer KeyPair
	// EtcdClient is how the API server authenticates to the embedded etcd.
	EtcdClient KeyPair
	// FrontProxyCA verifies the aggregator's proxy client, separately from CA,
	// so that no ordinary client certificate can assert request headers.
	FrontProxyCA KeyPair
	// FrontProxyClient is the aggregator's identity when it proxies to extension servers.
	FrontProxyClient KeyPair
	// ServiceAccountKey signs service account tokens; its public half verifies them.
	ServiceAccountKey string
}

// FrontProxyClientName is the common name of the aggregator's proxy client certificate.
const FrontProxyClientName = "front-proxy-client"

// AdminUser and AdminGroup are the identity of admin.kubeconfig.
const (
	AdminUser  = "milo-admin"
	AdminGroup = "system:masters"
)

// Layout returns the file names under dir without touching the disk.
func Layout(dir string) Files {
	pair := func(name string) KeyPair {
		return KeyPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	}
	return Files{
		CA:                pair("ca"),
		Serving:           pair("apiserver"),
		Admin:             pair("admin"),
		EtcdServer:        pair("etcd-server"),
		EtcdClient:        pair("etcd-client"),
		FrontProxyCA:      pair("front-proxy-ca"),
		FrontProxyClient:  pair("front-proxy-client"),
		ServiceAccountKey: filepath.Join(dir, "service-account.key"),
	}
}

// ServingNames are the DNS names and IP addresses the serving certificate must cover.
type ServingNames struct {
	DNS []string
	IPs []net.IP
}

// Ensure makes sure dir holds a complete, valid PKI and returns its layout.
// It creates what is missing and replaces what is invalid; valid files are left alone.
func Ensure(dir string, serving ServingNames) (Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("creating PKI directory: %w", err)
	}
	f := Layout(dir)
	ca, err := ensureCA(f.CA, "milo-ca")
	if err != nil {
		return Files{}, err
	}
	frontProxyCA, err := ensureCA(f.FrontProxyCA, "milo-front-proxy-ca")
	if err != nil {
		return Files{}, err
	}
	loopback := ServingNames{DNS: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}}
	leaves := []struct {
		pair   KeyPair
		issuer *authority
		tmpl   leafTemplate
	}{
		{f.Serving, ca, leafTemplate{cn: "milo-apiserver", serverAuth: true, names: serving}},
		{f.Admin, ca, leafTemplate{cn: AdminUser, orgs: []string{AdminGroup}, clientAuth: true}},
		{f.EtcdServer, ca, leafTemplate{cn: "milo-etcd", serverAuth: true, clientAuth: true, names: loopback}},
		{f.EtcdClient, ca, leafTemplate{cn: "milo-apiserver-etcd-client", clientAuth: true}},
		{f.FrontProxyClient, frontProxyCA, leafTemplate{cn: FrontProxyClientName, clientAuth: true}},
	}
	for _, l := range leaves {
		if err := ensureLeaf(l.pair, l.issuer, l.tmpl); err != nil {
			return Files{}, err
		}
	}
	if err := ensureServiceAccountKey(f.ServiceAccountKey); err != nil {
		return Files{}, err
	}
	return f, nil
}

type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

type leafTemplate struct {
	cn         string
	orgs       []string
	serverAuth bool
	clientAuth bool
	names      ServingNames
}

func ensureCA(pair KeyPair, cn string) (*authority, error) {
	if cert, key, err := loadPair(pair); err == nil && cert.IsCA && time.Until(cert.NotAfter) > renewBefore {
		return &authority{cert: cert, key: key}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating %s key: %w", cn, err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: cn}, key)
	if err != nil {
		return nil, fmt.Errorf("generating %s certificate: %w", cn, err)
	}
	if time.Until(cert.NotAfter) < caValidity-24*time.Hour {
		// client-go's helper already issues a ten-year CA; this only guards a future change there.
		return nil, fmt.Errorf("generated %s certificate is valid only until %s", cn, cert.NotAfter)
	}
	if err := writePair(pair, cert, key); err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key}, nil
}

func ensureLeaf(pair KeyPair, ca *authority, t leafTemplate) error {
	if cert, _, err := loadPair(pair); err == nil && leafStillGood(cert, ca, t) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key for %s: %w", t.cn, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).SetInt64(math.MaxInt64))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: t.cn, Organization: t.orgs},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     t.names.DNS,
		IPAddresses:  t.names.IPs,
	}
	if t.serverAuth {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if t.clientAuth {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return fmt.Errorf("signing certificate for %s: %w", t.cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	return writePair(pair, cert, key)
}

// leafStillGood reports whether an existing certificate can be kept: it chains to
// the current CA, is not about to expire, and names everything the template asks for.
func leafStillGood(cert *x509.Certificate, ca *authority, t leafTemplate) bool {
	if cert.CheckSignatureFrom(ca.cert) != nil || time.Until(cert.NotAfter) < renewBefore {
		return false
	}
	if cert.Subject.CommonName != t.cn || !slices.Equal(cert.Subject.Organization, t.orgs) {
		return false
	}
	for _, name := range t.names.DNS {
		if !slices.Contains(cert.DNSNames, name) {
			return false
		}
	}
	for _, ip := range t.names.IPs {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func ensureServiceAccountKey(path string) error {
	if data, err := os.ReadFile(path); err == nil {
		if _, err := keyutil.ParsePrivateKeyPEM(data); err == nil {
			return nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating service account key: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, keyPEM, 0o600)
}

func loadPair(pair KeyPair) (*x509.Certificate, crypto.Signer, error) {
	certs, err := certutil.CertsFromFile(pair.CertFile)
	if err != nil {
		return nil, nil, err
	}
	keyData, err := os.ReadFile(pair.KeyFile)
	if err != nil {
		return nil, nil, err
	}
	parsed, err := keyutil.ParsePrivateKeyPEM(keyData)
	if err != nil {
		return nil, nil, err
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("private key cannot sign")
	}
	if !publicKeysEqual(certs[0].PublicKey, key.Public()) {
		return nil, nil, errors.New("certificate and key do not match")
	}
	return certs[0], key, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ka, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ka.Equal(b)
}

func writePair(pair KeyPair, cert *x509.Certificate, key crypto.Signer) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	// The key goes first: a crash between the two writes leaves a mismatched pair,
	// which loadPair detects and the next start regenerates.
	if err := WriteFileAtomic(pair.KeyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(pair.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644)
}

// WriteFileAtomic writes data to path so that readers see either the old or the new
// content in full, even across a crash.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after a successful rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close() //nolint:errcheck
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close() //nolint:errcheck
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close() //nolint:errcheck
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
