package framework

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	// The database/sql driver of PostgreSQL kine itself uses.
	_ "github.com/jackc/pgx/v5/stdlib"
)

// PostgresServer is the machine's PostgreSQL server the SQL storage tests use.
const PostgresServer = "postgres://postgres@127.0.0.1:5432"

// ErrNoPostgres says no PostgreSQL server answers: tests needing one skip,
// loudly, except under CI=true, where they fail.
var ErrNoPostgres = errors.New("no PostgreSQL server answers at 127.0.0.1:5432")

// Postgres is one database of a test run's own on the machine's server.
type Postgres struct {
	// URL is the database's, for --storage-backend (kine creates the database).
	URL   string
	name  string
	admin *sql.DB
}

// NewPostgres names a new database, unique to this run, with prefix.
func NewPostgres(prefix string) (*Postgres, error) {
	admin, err := sql.Open("pgx", PostgresServer+"/postgres?sslmode=disable")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("%w: %v", ErrNoPostgres, err)
	}
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	return &Postgres{URL: fmt.Sprintf("%s/%s?sslmode=disable", PostgresServer, name), name: name, admin: admin}, nil
}

// MustHavePostgres reports whether err (from NewPostgres) means the tests
// needing PostgreSQL must fail rather than skip: they run under CI=true.
func MustHavePostgres() bool { return os.Getenv("CI") == "true" }

// Query runs a query on the database and returns the first column of its one row.
func (p *Postgres) QueryInt(query string, args ...any) (int64, error) {
	db, err := sql.Open("pgx", p.URL)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	err = db.QueryRow(query, args...).Scan(&n)
	return n, err
}

// Drop removes the database, closing whatever is still connected to it.
func (p *Postgres) Drop() {
	_, _ = p.admin.Exec(fmt.Sprintf(`DROP DATABASE IF EXISTS %q WITH (FORCE)`, p.name))
	p.admin.Close()
}
