package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestMiloKubeconfigGetsIntoProjects(t *testing.T) {
	m := shared
	a, b := m.newProject(t, "kc-a"), m.newProject(t, "kc-b")
	dir := t.TempDir()
	base := filepath.Join(dir, "config")
	data, err := os.ReadFile(m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base, data, 0o600); err != nil {
		t.Fatal(err)
	}

	// A standalone kubeconfig for one project.
	out, err := exec.Command(miloBin, "kubeconfig", "--kubeconfig", base, "--project", a).Output()
	if err != nil {
		t.Fatalf("milo kubeconfig: %v", err)
	}
	standalone := filepath.Join(dir, a+".kubeconfig")
	if err := os.WriteFile(standalone, out, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"create", "configmap", "where", "--from-literal=project=" + a}} {
		if r := m.kubectlWith(t, standalone, "", args...); r.err != nil {
			t.Fatalf("kubectl %v: %v %s", args, r.err, r.stderr)
		}
	}

	// Contexts merged into one kubeconfig; moving between projects is use-context.
	for _, p := range []string{a, b} {
		if out, err := exec.Command(miloBin, "kubeconfig", "--kubeconfig", base, "--project", p, "--merge").CombinedOutput(); err != nil {
			t.Fatalf("milo kubeconfig --merge: %v %s", err, out)
		}
	}
	for _, p := range []string{a, b} {
		if r := m.kubectlWith(t, base, "", "config", "use-context", "project-"+p); r.err != nil {
			t.Fatalf("use-context: %v %s", r.err, r.stderr)
		}
		r := m.kubectlWith(t, base, "", "get", "configmaps", "-o", "name", "--field-selector", "metadata.name!=kube-root-ca.crt")
		want := ""
		if p == a {
			want = "configmap/where"
		}
		if r.err != nil || strings.TrimSpace(r.stdout) != want {
			t.Fatalf("configmaps in %s: %q %v %s, want %q", p, r.stdout, r.err, r.stderr, want)
		}
	}
	if out, err := exec.Command(miloBin, "kubeconfig", "--kubeconfig", base, "--project", "Bad_Name").CombinedOutput(); err == nil || !strings.Contains(string(out), "not a valid project name") {
		t.Fatalf("bad project name: %v %s", err, out)
	}
}
