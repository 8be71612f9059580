package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"go.miloapis.com/milo/pkg/kubeconfig"
	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

// The binaries under test, built once per test run by TestMain.
var (
	miloBin    string
	kubectlBin string
	// shared is one server for every test that does not restart or reconfigure it.
	shared *milo
	// sharedArgs are the shared server's flags.
	sharedArgs []string
	// sharedIssuer is the OIDC issuer the shared server trusts.
	sharedIssuer *oidcIssuer
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	binDir, err := os.MkdirTemp("", "milo-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	bins, err := framework.Build(binDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	miloBin, kubectlBin = bins.Milo, bins.Kubectl

	dataDir, err := os.MkdirTemp("", "milo-e2e-shared-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dataDir)
	tokens := filepath.Join(dataDir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(tokenFile), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sharedIssuer, err = startOIDCIssuer(dataDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the OIDC issuer: %v\n", err)
		return 1
	}
	defer sharedIssuer.server.Close()
	sharedArgs = append([]string{"--token-auth-file", tokens, fmt.Sprintf("--max-project-list-items=%d", sharedMaxListItems), fmt.Sprintf("--project-list-concurrency=%d", sharedListConcurrency), fmt.Sprintf("--max-project-watches=%d", sharedMaxWatches), fmt.Sprintf("--tenant-concurrency=%d", sharedSeats), "--project-crds", "--project-crd-conversion-webhook-prefixes=" + sharedConversionPrefix}, sharedIssuer.flags()...)
	storage, dropStorage, err := storageArgs()
	if errors.Is(err, framework.ErrNoSQLServer) && !framework.MustHaveSQL() {
		fmt.Fprintf(os.Stderr, "!!! SKIPPING the e2e tests on %s: %v\n", os.Getenv("MILO_E2E_STORAGE"), err)
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer dropStorage()
	// The storage is the shared server's alone: another server started with
	// sharedArgs (the project CRDs' server) keeps its own.
	shared, err = startMilo(dataDir, append(sharedArgs, storage...)...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the shared server: %v\n", err)
		return 1
	}
	// Projects of the tests belong to organization acme.
	if err := shared.ensureOrganization("acme"); err != nil {
		fmt.Fprintf(os.Stderr, "creating organization acme: %v\n", err)
		return 1
	}
	code := m.Run()
	if exit, err := stopCRDServer(); err != nil || exit != 0 {
		fmt.Fprintf(os.Stderr, "stopping the project CRDs' server: exit %d, %v\n", exit, err)
		if code == 0 {
			code = 1
		}
	}
	if exit, err := shared.stop(); err != nil || exit != 0 {
		fmt.Fprintf(os.Stderr, "stopping the shared server: exit %d, %v\n%s", exit, err, shared.logTail())
		if code == 0 {
			code = 1
		}
	}
	return code
}

// tokenFile gives the shared server static bearer tokens for ordinary users
// (kube-apiserver's --token-auth-file format: token,user,uid,"groups").
const tokenFile = `alice-token,alice,alice-uid,"developers"
bob-token,bob,bob-uid,"developers"
carol-token,carol,carol-uid,"outsiders"
`

// milo is one running `milo start` process.
type milo struct {
	*framework.Server
}

// startMilo runs `milo start` on a kernel-chosen loopback port with dataDir and
// waits until it reports ready.
func startMilo(dataDir string, extraArgs ...string) (*milo, error) {
	s, err := framework.Start(miloBin, dataDir, extraArgs...)
	if err != nil {
		return nil, err
	}
	return &milo{s}, nil
}

// stop sends SIGTERM and returns the exit code.
func (m *milo) stop() (int, error) { return m.Stop() }

func (m *milo) logTail() string { return m.LogTail() }

// stopOnCleanup stops the server when the test ends, failing the test on an unclean exit.
func (m *milo) stopOnCleanup(t *testing.T) {
	t.Cleanup(func() {
		select {
		case <-m.Exited:
			return
		default:
		}
		if code, err := m.stop(); err != nil || code != 0 {
			t.Errorf("milo exit %d, %v\n%s", code, err, m.logTail())
		}
	})
}

// restConfig is the admin's client configuration of the platform.
func (m *milo) restConfig(t testing.TB) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	return cfg
}

// configAt is the admin's client configuration of the control plane under path,
// e.g. tenancy.ProjectPath("web"), as a user's kubeconfig would hold it.
func (m *milo) configAt(t testing.TB, path string) *rest.Config {
	t.Helper()
	cfg := m.restConfig(t)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + path
	return cfg
}

func (m *milo) projectConfig(t testing.TB, project string) *rest.Config {
	return m.configAt(t, tenancy.ProjectPath(project))
}

func kubeFor(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dynamicFor(t testing.TB, cfg *rest.Config) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (m *milo) kube(t testing.TB) kubernetes.Interface { return kubeFor(t, m.restConfig(t)) }
func (m *milo) dynamic(t testing.TB) dynamic.Interface { return dynamicFor(t, m.restConfig(t)) }
func (m *milo) projectKube(t testing.TB, p string) kubernetes.Interface {
	return kubeFor(t, m.projectConfig(t, p))
}
func (m *milo) projectDynamic(t testing.TB, p string) dynamic.Interface {
	return dynamicFor(t, m.projectConfig(t, p))
}

// as is a client of the control plane under path ("" for the platform) that
// authenticates with a bearer token (empty: anonymous) instead of the admin certificate.
func (m *milo) as(t testing.TB, token, path string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(m.configAt(t, path))
	cfg.BearerToken = token
	return kubeFor(t, cfg)
}

// projectKubeconfig writes a kubeconfig for a project the way users get one:
// derived from the admin kubeconfig by pkg/kubeconfig (milo kubeconfig).
func (m *milo) projectKubeconfig(t *testing.T, project string) string {
	t.Helper()
	return m.derivedKubeconfig(t, kubeconfig.Target{Project: project}, project)
}

// derivedKubeconfig writes the kubeconfig of target, derived from the admin's,
// to a file named for name.
func (m *milo) derivedKubeconfig(t *testing.T, target kubeconfig.Target, name string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	derived, err := kubeconfig.Derive(cfg, "", target)
	if err != nil {
		t.Fatal(err)
	}
	only, err := kubeconfig.Only(cfg, derived)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*only, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubectlResult is the outcome of one kubectl run.
type kubectlResult struct {
	stdout, stderr string
	err            error
}

// kubectl runs the real kubectl against m's platform, with stdin if given.
func (m *milo) kubectl(t *testing.T, stdin string, args ...string) kubectlResult {
	t.Helper()
	return m.kubectlWith(t, m.Kubeconfig, stdin, args...)
}

// kubectlWith runs the real kubectl with the given kubeconfig.
func (m *milo) kubectlWith(t *testing.T, kubeconfig, stdin string, args ...string) kubectlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+filepath.Join(m.DataDir, "kubectl-cache"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	return kubectlResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// mustKubectl runs kubectl and fails the test if it does not succeed.
func (m *milo) mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	r := m.kubectl(t, stdin, args...)
	if r.err != nil {
		t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.err, r.stdout, r.stderr)
	}
	return r.stdout
}

// waitEstablished waits, with kubectl, until each named CRD ("crd/NAME") is
// Established. A CRD just created holds `status.conditions: null` until the
// server's first status write, and kubectl wait fails at once on a null
// rather than waiting, so that answer alone is asked again.
func (m *milo) waitEstablished(t *testing.T, crds ...string) {
	t.Helper()
	args := append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, crds...)
	eventually(t, "kubectl "+strings.Join(args, " "), func() error {
		r := m.kubectl(t, "", args...)
		if r.err != nil && strings.Contains(r.stderr, ".status.conditions accessor error") {
			return fmt.Errorf("%s", strings.TrimSpace(r.stderr))
		}
		if r.err != nil {
			t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.err, r.stdout, r.stderr)
		}
		return nil
	})
}

// ensureOrganization creates an Organization unless it exists.
func (m *milo) ensureOrganization(name string) error {
	cmd := exec.Command(kubectlBin, "--kubeconfig", m.Kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader("apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Organization\nmetadata: {name: " + name + "}\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
