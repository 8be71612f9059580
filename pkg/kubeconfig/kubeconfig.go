// Package kubeconfig writes kubeconfig files for Milo's identities and contexts.
package kubeconfig

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"go.miloapis.com/milo/pkg/pki"
)

// ClientCert describes a kubeconfig whose user authenticates by client certificate.
type ClientCert struct {
	// Name names the cluster, user and context inside the file.
	Name string
	// Server is the API server URL, e.g. https://127.0.0.1:6443.
	Server string
	// CAFile verifies the server; CertFile and KeyFile are the client's identity.
	CAFile, CertFile, KeyFile string
}

// Build returns the kubeconfig with all certificate data embedded, so the file
// keeps working when copied elsewhere.
func (c ClientCert) Build() (*clientcmdapi.Config, error) {
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA for kubeconfig: %w", err)
	}
	cert, err := os.ReadFile(c.CertFile)
	if err != nil {
		return nil, fmt.Errorf("reading client certificate for kubeconfig: %w", err)
	}
	key, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("reading client key for kubeconfig: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: ca}
	cfg.AuthInfos[c.Name] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: c.Name}
	cfg.CurrentContext = c.Name
	return cfg, nil
}

// Write builds the kubeconfig and writes it atomically to path, readable only by its owner
// because it holds a private key.
func (c ClientCert) Write(path string) error {
	cfg, err := c.Build()
	if err != nil {
		return err
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return pki.WriteFileAtomic(path, data, 0o600)
}
