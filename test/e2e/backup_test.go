package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBackupAndRestore saves a running server's storage while a project
// deletion waits on a finalizer (its other objects already gone), lets the
// deletion and its purge finish and another project's object go, then
// restores the backup into a new data directory (the PKI copied): every
// project and object is back as it was, and the interrupted deletion
// resumes and completes there.
func TestBackupAndRestore(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a := filepath.Join(dir, "a")
	m, err := startMilo(a)
	if err != nil {
		t.Fatal(err)
	}
	m.stopOnCleanup(t)
	if err := m.ensureOrganization("acme"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bk-a", "bk-b"} {
		m.createProject(t, p)
		m.waitProjectReady(t, p)
		createNamespace(t, m.projectKube(t, p), "keep")
		createConfigMap(t, m.projectKube(t, p), "keep", "x", map[string]string{"owner": p}, nil)
	}
	if _, err := m.projectKube(t, "bk-a").CoreV1().ConfigMaps("keep").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, "bk-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bk-a's deletion waiting on its finalizer", func() error {
		if status, msg, _ := projectCondition(t, m, "bk-a", "ResourceCleanup"); status != "True" || !strings.Contains(msg, "keep/held") {
			return fmt.Errorf("ResourceCleanup %s %q", status, msg)
		}
		return nil
	})
	file := filepath.Join(dir, "milo.backup")
	milo := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(miloBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("milo %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := milo("backup", "save", "--data-dir", a, file); !strings.Contains(out, "saved ") {
		t.Fatalf("backup save: %s", out)
	}

	// After the backup: bk-a's deletion and purge finish, bk-b loses x.
	held, err := m.projectKube(t, "bk-a").CoreV1().ConfigMaps("keep").Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held.Finalizers = nil
	if _, err := m.projectKube(t, "bk-a").CoreV1().ConfigMaps("keep").Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bk-a deleted", func() error {
		if _, err := m.dynamic(t).Resource(projectsGVR).Get(ctx, "bk-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("bk-a: %v", err)
		}
		return nil
	})
	if err := m.projectKube(t, "bk-b").CoreV1().ConfigMaps("keep").Delete(ctx, "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, err := m.stop(); err != nil || code != 0 {
		t.Fatalf("stopping: %d %v", code, err)
	}

	// Restored into a new data directory with the same PKI.
	b := filepath.Join(dir, "b")
	copyDir(t, filepath.Join(a, "pki"), filepath.Join(b, "pki"))
	if out := milo("backup", "restore", "--data-dir", b, file); !strings.Contains(out, "restored ") {
		t.Fatalf("backup restore: %s", out)
	}
	if out, err := exec.Command(miloBin, "backup", "restore", "--data-dir", b, file).CombinedOutput(); err == nil || !strings.Contains(string(out), "restore into an empty one") {
		t.Fatalf("a second restore into the same storage: %v\n%s", err, out)
	}
	r, err := startMilo(b)
	if err != nil {
		t.Fatal(err)
	}
	r.stopOnCleanup(t)
	if cm, err := r.projectKube(t, "bk-b").CoreV1().ConfigMaps("keep").Get(ctx, "x", metav1.GetOptions{}); err != nil || cm.Data["owner"] != "bk-b" {
		t.Fatalf("bk-b's x after the restore: %v %v", cm, err)
	}
	project, err := r.dynamic(t).Resource(projectsGVR).Get(ctx, "bk-a", metav1.GetOptions{})
	if err != nil || project.GetDeletionTimestamp() == nil {
		t.Fatalf("bk-a after the restore: %v, being deleted: %v", err, project != nil && project.GetDeletionTimestamp() != nil)
	}
	// The deletion goes on where the backup left it.
	held, err = r.projectKube(t, "bk-a").CoreV1().ConfigMaps("keep").Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held.Finalizers = nil
	if _, err := r.projectKube(t, "bk-a").CoreV1().ConfigMaps("keep").Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bk-a's restored deletion finished", func() error {
		if _, err := r.dynamic(t).Resource(projectsGVR).Get(ctx, "bk-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("bk-a: %v", err)
		}
		return nil
	})
	if cm, err := r.projectKube(t, "bk-b").CoreV1().ConfigMaps("keep").Get(ctx, "x", metav1.GetOptions{}); err != nil || cm.Data["owner"] != "bk-b" {
		t.Fatalf("bk-b after bk-a's purge: %v %v", cm, err)
	}
}
