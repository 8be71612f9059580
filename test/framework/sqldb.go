package framework

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	// The database/sql drivers of PostgreSQL and MySQL kine itself uses.
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// The machine's SQL servers the SQL storage tests use.
const (
	PostgresServer = "postgres://postgres@127.0.0.1:5432"
	MySQLServer    = "root@tcp(127.0.0.1:3306)"
)

// ErrNoSQLServer says the SQL server a test asked for does not answer:
// tests needing one skip, loudly, except under CI=true, where they fail.
var ErrNoSQLServer = errors.New("no SQL server answers")

// SQLBackends are the SQL servers a test can ask a database of.
var SQLBackends = []string{"postgres", "mysql"}

// SQLDatabase is one database of a test run's own on one of the machine's
// SQL servers.
type SQLDatabase struct {
	// Backend is "postgres" or "mysql".
	Backend string
	// URL is the database's, for --storage-backend (kine creates the database).
	URL   string
	name  string
	admin *sql.DB
	// driver and dsn open the database itself.
	driver, dsn string
}

// NewSQLDatabase names a new database on the machine's server of backend
// ("postgres" or "mysql", MariaDB here), unique to this run, with prefix.
func NewSQLDatabase(backend, prefix string) (*SQLDatabase, error) {
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	d := &SQLDatabase{Backend: backend, name: name}
	var adminDriver, adminDSN, where string
	switch backend {
	case "postgres":
		adminDriver, adminDSN, where = "pgx", PostgresServer+"/postgres?sslmode=disable", "PostgreSQL at 127.0.0.1:5432"
		d.URL = fmt.Sprintf("%s/%s?sslmode=disable", PostgresServer, name)
		d.driver, d.dsn = "pgx", d.URL
	case "mysql":
		adminDriver, adminDSN, where = "mysql", MySQLServer+"/", "MySQL (MariaDB) at 127.0.0.1:3306"
		d.URL = fmt.Sprintf("mysql://%s/%s", MySQLServer, name)
		d.driver, d.dsn = "mysql", MySQLServer+"/"+name
	default:
		return nil, fmt.Errorf("no SQL backend %q: use one of %s", backend, strings.Join(SQLBackends, ", "))
	}
	admin, err := sql.Open(adminDriver, adminDSN)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("%w: no %s: %v", ErrNoSQLServer, where, err)
	}
	d.admin = admin
	return d, nil
}

// MustHaveSQL reports whether err (from NewSQLDatabase) means the tests
// needing a SQL server must fail rather than skip: they run under CI=true.
func MustHaveSQL() bool { return os.Getenv("CI") == "true" }

// LiveKeys counts the keys of the SQL storage (kine's table) whose last row
// is not a deletion and whose name contains part.
func (d *SQLDatabase) LiveKeys(part string) (int64, error) {
	db, err := sql.Open(d.driver, d.dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	placeholder := "?"
	if d.Backend == "postgres" {
		placeholder = "$1"
	}
	var n int64
	err = db.QueryRow(`SELECT count(*) FROM kine k WHERE k.name LIKE `+placeholder+
		` AND k.deleted = 0 AND k.id = (SELECT max(id) FROM kine WHERE name = k.name)`, "%"+part+"%").Scan(&n)
	return n, err
}

// Drop removes the database, closing whatever is still connected to it.
func (d *SQLDatabase) Drop() {
	if d.Backend == "postgres" {
		_, _ = d.admin.Exec(fmt.Sprintf(`DROP DATABASE IF EXISTS %q WITH (FORCE)`, d.name))
	} else {
		_, _ = d.admin.Exec("DROP DATABASE IF EXISTS `" + d.name + "`")
	}
	d.admin.Close()
}
