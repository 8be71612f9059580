package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

// postgresFor returns a database of this test's own on the machine's
// PostgreSQL, dropped when the test ends; it skips loudly where no server
// answers, and fails under CI=true.
func postgresFor(t *testing.T, prefix string) *framework.Postgres {
	t.Helper()
	pg, err := framework.NewPostgres(prefix)
	if errors.Is(err, framework.ErrNoPostgres) && !framework.MustHavePostgres() {
		t.Skipf("!!! SKIPPED: %v — the SQL storage is not tested", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Drop)
	return pg
}

// liveKeys counts the keys under the SQL storage (kine's table) whose last
// row is not a deletion and whose name contains part.
func liveKeys(t *testing.T, pg *framework.Postgres, part string) int64 {
	t.Helper()
	n, err := pg.QueryInt(`SELECT count(*) FROM kine k WHERE k.name LIKE $1 AND k.deleted = 0 AND k.id = (SELECT max(id) FROM kine WHERE name = k.name)`, "%"+part+"%")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProjectLifecycleOnPostgres runs Milo on PostgreSQL (kine in the
// process): two projects with the same namespace and names kept apart,
// everything kept across a restart, a deleted project purged until no key
// of it is left in the SQL table, and its name, recycled, starting empty.
func TestProjectLifecycleOnPostgres(t *testing.T) {
	pg := postgresFor(t, "milo_e2e_lifecycle")
	dataDir := t.TempDir()
	first, err := startMilo(dataDir, "--storage-backend", pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	first.stopOnCleanup(t)
	if err := first.ensureOrganization("acme"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []string{"sql-a", "sql-b"} {
		first.createProject(t, p)
		first.waitProjectReady(t, p)
		createNamespace(t, first.projectKube(t, p), "keep")
		createConfigMap(t, first.projectKube(t, p), "keep", "same-name", map[string]string{"owner": p}, nil)
	}
	for _, p := range []string{"sql-a", "sql-b"} {
		list, err := first.projectKube(t, p).CoreV1().ConfigMaps("keep").List(ctx, metav1.ListOptions{})
		if own := ownConfigMaps(list.Items); err != nil || len(own) != 1 || own[0].Data["owner"] != p {
			t.Fatalf("%s lists %v, %v", p, own, err)
		}
	}
	project, err := first.dynamic(t).Resource(projectsGVR).Get(ctx, "sql-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := "/" + tenancy.ProjectID(string(project.GetUID())) + "/"
	if n := liveKeys(t, pg, id); n < 3 {
		t.Fatalf("project sql-a has %d keys in the SQL table", n)
	}

	// A restart reads everything back from PostgreSQL.
	if code, err := first.stop(); err != nil || code != 0 {
		t.Fatalf("stopping: %d %v", code, err)
	}
	second, err := startMilo(dataDir, "--storage-backend", pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	second.stopOnCleanup(t)
	for _, p := range []string{"sql-a", "sql-b"} {
		cm, err := second.projectKube(t, p).CoreV1().ConfigMaps("keep").Get(ctx, "same-name", metav1.GetOptions{})
		if err != nil || cm.Data["owner"] != p {
			t.Fatalf("%s after the restart: %v %v", p, cm, err)
		}
	}

	// Deleting sql-a purges every key of it; sql-b keeps its own.
	if err := second.dynamic(t).Resource(projectsGVR).Delete(ctx, "sql-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "sql-a gone and purged", func() error {
		if _, err := second.dynamic(t).Resource(projectsGVR).Get(ctx, "sql-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("project: %v", err)
		}
		if n := liveKeys(t, pg, id); n != 0 {
			return fmt.Errorf("%d keys of sql-a left", n)
		}
		return nil
	})
	if cm, err := second.projectKube(t, "sql-b").CoreV1().ConfigMaps("keep").Get(ctx, "same-name", metav1.GetOptions{}); err != nil || cm.Data["owner"] != "sql-b" {
		t.Fatalf("sql-b after sql-a's purge: %v %v", cm, err)
	}

	// The name, recycled, is a new project: nothing of the old one shows.
	second.createProject(t, "sql-a")
	second.waitProjectReady(t, "sql-a")
	if _, err := second.projectKube(t, "sql-a").CoreV1().ConfigMaps("keep").Get(ctx, "same-name", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the recycled sql-a sees the old project's ConfigMap: %v", err)
	}
}

// storageArgs are the flags that put a server of the e2e run on the storage
// MILO_E2E_STORAGE names: the embedded etcd by default, or "postgres" (a
// database of the run's own, dropped at its end).
func storageArgs() (args []string, cleanup func(), err error) {
	switch os.Getenv("MILO_E2E_STORAGE") {
	case "":
		return nil, func() {}, nil
	case "postgres":
		pg, err := framework.NewPostgres("milo_e2e_shared")
		if err != nil {
			return nil, nil, err
		}
		return []string{"--storage-backend", pg.URL}, pg.Drop, nil
	default:
		return nil, nil, fmt.Errorf("MILO_E2E_STORAGE=%q: use postgres, or leave it unset for the embedded etcd", os.Getenv("MILO_E2E_STORAGE"))
	}
}
