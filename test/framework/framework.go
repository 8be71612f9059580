// Package framework runs the real milo binary for end-to-end test packages:
// it builds milo and kubectl once per test binary and starts and stops
// `milo start` processes on loopback.
package framework

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binaries are the programs under test.
type Binaries struct {
	Milo, Kubectl string
}

// Build compiles milo and kubectl from this repository into dir.
func Build(dir string) (Binaries, error) {
	b := Binaries{Milo: filepath.Join(dir, "milo"), Kubectl: filepath.Join(dir, "kubectl")}
	// kubectl reports its own version as a release's would, or `kubectl version`
	// fails to parse the library's placeholder.
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	list.Dir = RepoRoot()
	kube, err := list.Output()
	if err != nil {
		return b, fmt.Errorf("reading the Kubernetes version: %w", err)
	}
	kubectlFlags := "-X k8s.io/component-base/version.gitVersion=" + strings.TrimSpace(string(kube))
	for _, target := range []struct{ out, pkg, ldflags string }{{b.Milo, "./cmd/milo", ""}, {b.Kubectl, "./test/kubectl", kubectlFlags}} {
		cmd := exec.Command("go", "build", "-ldflags", target.ldflags, "-o", target.out, target.pkg)
		cmd.Dir = RepoRoot()
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return b, fmt.Errorf("building %s: %w", target.pkg, err)
		}
	}
	return b, nil
}

// RepoRoot is the root of this repository.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Server is one running `milo start` process.
type Server struct {
	Cmd     *exec.Cmd
	DataDir string
	// URL is where it serves; Kubeconfig is its admin kubeconfig.
	URL, Kubeconfig string
	// Logs is what it wrote to stderr.
	Logs *SyncBuffer
	// Exited is closed once the process has exited, with ExitErr.
	Exited  chan struct{}
	ExitErr error
}

// Start runs `milo start` on a kernel-chosen loopback port with dataDir and
// waits until it reports ready.
func Start(miloBin, dataDir string, extraArgs ...string) (*Server, error) {
	args := append([]string{"start", "--data-dir", dataDir, "--secure-port", "0"}, extraArgs...)
	cmd := exec.Command(miloBin, args...)
	logs := &SyncBuffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Cmd: cmd, DataDir: dataDir, Logs: logs, Exited: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "Milo is ready at "); ok {
				ready <- url
			}
		}
	}()
	go func() {
		s.ExitErr = cmd.Wait()
		close(s.Exited)
	}()
	select {
	case s.URL = <-ready:
	case <-s.Exited:
		return nil, fmt.Errorf("milo exited before it was ready: %v\n%s", s.ExitErr, s.LogTail())
	case <-time.After(2 * time.Minute):
		s.Cmd.Process.Kill() //nolint:errcheck
		return nil, fmt.Errorf("milo was not ready within 2 minutes\n%s", s.LogTail())
	}
	s.Kubeconfig = filepath.Join(dataDir, "admin.kubeconfig")
	return s, nil
}

// Stop sends SIGTERM and returns the exit code.
func (s *Server) Stop() (int, error) {
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return -1, err
	}
	select {
	case <-s.Exited:
	case <-time.After(time.Minute):
		// Go's runtime answers SIGQUIT with every goroutine's stack: the
		// failure says where the server hung.
		s.Cmd.Process.Signal(syscall.SIGQUIT) //nolint:errcheck
		select {
		case <-s.Exited:
		case <-time.After(10 * time.Second):
			s.Cmd.Process.Kill() //nolint:errcheck
			<-s.Exited
		}
		return -1, fmt.Errorf("milo did not exit within a minute of SIGTERM; its goroutines: %s", s.hungGoroutines())
	}
	return s.Cmd.ProcessState.ExitCode(), nil
}

// hungGoroutines writes the server's whole log, with the goroutine dump
// SIGQUIT printed, to a file and returns its name, and the stacks that
// pass through Milo's own code, which a log tail would cut.
func (s *Server) hungGoroutines() string {
	out := s.Logs.String()
	var milo []string
	for _, g := range strings.Split(out, "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && strings.Contains(g, "go.miloapis.com/milo/") {
			milo = append(milo, g)
		}
	}
	name := "(not written)"
	if f, err := os.CreateTemp("", "milo-hung-*.log"); err == nil {
		f.WriteString(out) //nolint:errcheck
		f.Close()          //nolint:errcheck
		name = f.Name()
	}
	summary := strings.Join(milo, "\n\n")
	if len(summary) > 20000 {
		summary = summary[:20000] + "\n..."
	}
	return "the whole log is in " + name + "; the stacks in Milo's code:\n" + summary
}

// LogTail is the end of the server's log, for failure messages.
func (s *Server) LogTail() string {
	out := s.Logs.String()
	if len(out) > 8000 {
		out = "...\n" + out[len(out)-8000:]
	}
	return out
}

// SyncBuffer collects a process's output safely while tests read it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Eventually retries f until it succeeds or timeout passes, and returns its last error.
func Eventually(timeout time.Duration, f func() error) error {
	var err error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = f(); err == nil {
			return nil
		}
	}
	return err
}
