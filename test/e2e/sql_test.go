package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

// sqlDatabaseFor returns a database of this test's own on the machine's
// server of backend ("postgres" or "mysql"), dropped when the test ends; it
// skips loudly where no server answers, and fails under CI=true.
func sqlDatabaseFor(t *testing.T, backend, prefix string) *framework.SQLDatabase {
	t.Helper()
	db, err := framework.NewSQLDatabase(backend, prefix)
	if errors.Is(err, framework.ErrNoSQLServer) && !framework.MustHaveSQL() {
		t.Skipf("!!! SKIPPED: %v — the SQL storage on %s is not tested", err, backend)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Drop)
	return db
}

// liveKeys counts the keys under the SQL storage (kine's table) whose last
// row is not a deletion and whose name contains part.
func liveKeys(t *testing.T, db *framework.SQLDatabase, part string) int64 {
	t.Helper()
	n, err := db.LiveKeys(part)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProjectLifecycleOnSQL runs Milo on PostgreSQL and on MySQL (MariaDB
// here), kine in the process: two projects with the same namespace and
// names kept apart, everything kept across a restart, a deleted project
// purged until no key of it is left in the SQL table, and its name,
// recycled, starting empty; and two ClusterRoles whose names differ in case
// only are two objects, as on etcd (MySQL's default collation of kine's
// keys would make them one).
func TestProjectLifecycleOnSQL(t *testing.T) {
	for _, backend := range framework.SQLBackends {
		t.Run(backend, func(t *testing.T) { projectLifecycleOnSQL(t, sqlDatabaseFor(t, backend, "milo_e2e_lifecycle")) })
	}
}

func projectLifecycleOnSQL(t *testing.T, pg *framework.SQLDatabase) {
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
	// Keys compare as bytes on every backend: two ClusterRoles whose names
	// differ in case only are two objects, each with its own rules.
	for _, name := range []string{"Reader", "reader"} {
		if _, err := first.projectKube(t, "sql-a").RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{name}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating ClusterRole %s: %v", name, err)
		}
	}
	for _, name := range []string{"Reader", "reader"} {
		role, err := first.projectKube(t, "sql-a").RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil || role.Name != name || len(role.Rules) != 1 || role.Rules[0].ResourceNames[0] != name {
			t.Fatalf("ClusterRole %s beside its other-case twin: %v %v", name, role, err)
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
// MILO_E2E_STORAGE names: the embedded etcd by default, or "postgres" or
// "mysql" (a database of the run's own, dropped at its end).
func storageArgs() (args []string, cleanup func(), err error) {
	switch os.Getenv("MILO_E2E_STORAGE") {
	case "":
		return nil, func() {}, nil
	case "postgres", "mysql":
		db, err := framework.NewSQLDatabase(os.Getenv("MILO_E2E_STORAGE"), "milo_e2e_shared")
		if err != nil {
			return nil, nil, err
		}
		return []string{"--storage-backend", db.URL}, db.Drop, nil
	default:
		return nil, nil, fmt.Errorf("MILO_E2E_STORAGE=%q: use postgres or mysql, or leave it unset for the embedded etcd", os.Getenv("MILO_E2E_STORAGE"))
	}
}
