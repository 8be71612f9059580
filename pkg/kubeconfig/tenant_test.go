package kubeconfig

import (
	"strings"
	"testing"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func baseConfig() *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["milo"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443", CertificateAuthorityData: []byte("ca")}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["milo"] = &clientcmdapi.Context{Cluster: "milo", AuthInfo: "admin", Namespace: "kube-system"}
	cfg.CurrentContext = "milo"
	return cfg
}

func TestDeriveProjectAndOrganizationContexts(t *testing.T) {
	cfg := baseConfig()
	name, err := Derive(cfg, "", Target{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if name != "project-web" {
		t.Fatalf("context name %q", name)
	}
	got := cfg.Clusters[name]
	if got.Server != "https://127.0.0.1:6443/apis/resourcemanager.miloapis.com/v1alpha1/projects/web/control-plane" || string(got.CertificateAuthorityData) != "ca" {
		t.Fatalf("cluster %+v", got)
	}
	if ctx := cfg.Contexts[name]; ctx.AuthInfo != "admin" || ctx.Namespace != "" {
		t.Fatalf("context %+v", ctx)
	}
	if cfg.CurrentContext != "milo" || cfg.Clusters["milo"].Server != "https://127.0.0.1:6443" {
		t.Fatal("the base context changed")
	}

	// Derived from a project context, the URL is re-pointed, not nested.
	next, err := Derive(cfg, "project-web", Target{Project: "api"})
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Clusters[next].Server; s != "https://127.0.0.1:6443/apis/resourcemanager.miloapis.com/v1alpha1/projects/api/control-plane" {
		t.Fatalf("re-derived server %s", s)
	}
	org, err := Derive(cfg, "", Target{Organization: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Clusters[org].Server; !strings.HasSuffix(s, "/organizations/acme/control-plane") {
		t.Fatalf("organization server %s", s)
	}
	if ns := cfg.Contexts[org].Namespace; ns != "organization-acme" {
		t.Fatalf("organization context namespace %q", ns)
	}

	only, err := Only(cfg, "project-api")
	if err != nil {
		t.Fatal(err)
	}
	if len(only.Contexts) != 1 || len(only.Clusters) != 1 || len(only.AuthInfos) != 1 || only.CurrentContext != "project-api" {
		t.Fatalf("standalone config %+v", only)
	}
}

func TestDeriveRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		from   string
		target Target
		want   string
	}{
		{"", Target{}, "name a project or an organization"},
		{"", Target{Project: "a", Organization: "b"}, "not both"},
		{"", Target{Project: "Not_Valid"}, "not a valid project name"},
		{"nope", Target{Project: "web"}, `context "nope" not found`},
	} {
		if _, err := Derive(baseConfig(), tc.from, tc.target); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Derive(%q, %+v) = %v, want %q", tc.from, tc.target, err, tc.want)
		}
	}
}
