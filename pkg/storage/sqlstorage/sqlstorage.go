// Package sqlstorage runs kine in Milo's process: an etcd API over a SQL
// database (PostgreSQL, MySQL or MariaDB, or an embedded SQLite file), served on a unix
// socket only this process's user can open, for the API server and Milo's
// key-range work to use as they use etcd.
package sqlstorage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/generic"
	_ "github.com/k3s-io/kine/pkg/drivers/mysql" // mysql://
	_ "github.com/k3s-io/kine/pkg/drivers/pgsql" // postgres://
	"github.com/k3s-io/kine/pkg/drivers/sqlite"  // sqlite://
	"github.com/k3s-io/kine/pkg/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"k8s.io/klog/v2"
)

// Schemes are the storage backends served through kine.
var Schemes = []string{"postgres", "mysql", "sqlite"}

// Usage names the forms of a --storage-backend value.
const Usage = "postgres://USER[:PASSWORD]@HOST:PORT/DATABASE, mysql://USER[:PASSWORD]@tcp(HOST:PORT)/DATABASE or sqlite://PATH"

// Validate checks a --storage-backend value: postgres://... (a PostgreSQL
// connection URL), mysql://... (a MySQL or MariaDB data source name, as
// the Go MySQL driver reads it) or sqlite://PATH.
func Validate(endpoint string) error {
	scheme, rest, ok := strings.Cut(endpoint, "://")
	switch {
	case !ok:
		// Not echoed: a data source name without its scheme holds a password where no URL parser finds it.
		return fmt.Errorf("the storage backend is not a URL: use %s", Usage)
	case scheme == "postgres":
		if _, err := url.Parse(endpoint); err != nil {
			return fmt.Errorf("not a PostgreSQL URL: %v", redactErr(err, endpoint))
		}
		return nil
	case scheme == "mysql":
		c, err := mysql.ParseDSN(rest)
		if err != nil {
			return fmt.Errorf("not a MySQL data source name (mysql://USER[:PASSWORD]@tcp(HOST:PORT)/DATABASE): %v", redactErr(err, endpoint))
		}
		if c.DBName == "" {
			return errors.New("mysql:// names no database: use mysql://USER@tcp(HOST:PORT)/DATABASE (created if missing)")
		}
		return nil
	case scheme == "sqlite":
		if rest == "" {
			return errors.New("sqlite:// names no database file: use sqlite://PATH")
		}
		return nil
	}
	return fmt.Errorf("storage backend %q is not one of %s", scheme, strings.Join(Schemes, ", "))
}

// MaxOpenConnections is how many connections to the database one server
// opens at most.
const MaxOpenConnections = 40

// Config is one SQL storage to serve.
type Config struct {
	// Endpoint is the database: postgres://..., mysql://... or sqlite://PATH.
	Endpoint string
	// Socket is the path of the unix socket to serve the etcd API on.
	Socket string
}

// Server is kine, serving.
type Server struct {
	grpc   *grpc.Server
	cancel context.CancelFunc
	wg     *sync.WaitGroup
	url    string
}

// Start connects to the database (creating its tables where missing) and
// serves the etcd API on the socket until Close.
func Start(ctx context.Context, c Config) (*Server, error) {
	if err := Validate(c.Endpoint); err != nil {
		return nil, err
	}
	endpoint := c.Endpoint
	if rest, ok := strings.CutPrefix(endpoint, "sqlite://"); ok && !strings.Contains(rest, "?") {
		// A file name alone gets kine's options (write-ahead log, waits on a busy database).
		endpoint = "sqlite://" + rest + "?" + sqlite.DefaultParams
	}
	bctx, cancel := context.WithCancel(context.Background())
	wg := &sync.WaitGroup{}
	_, backend, err := drivers.New(bctx, wg, &drivers.Config{
		Endpoint: endpoint,
		// Bounded: a burst of requests must queue for a connection, not
		// open more than the database allows (PostgreSQL's default is 100).
		ConnectionPoolConfig: generic.ConnectionPoolConfig{
			MaxIdle: 20, MaxOpen: MaxOpenConnections, MaxIdleTime: 2 * time.Minute,
		},
		CompactInterval: 5 * time.Minute, CompactTimeout: 5 * time.Second, CompactMinRetain: 1000, CompactBatchSize: 1000,
		PollBatchSize: 500,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("opening the SQL storage: %v", redactErr(err, c.Endpoint))
	}
	if strings.HasPrefix(endpoint, "mysql://") {
		if err := binaryKeys(bctx, strings.TrimPrefix(endpoint, "mysql://")); err != nil {
			cancel()
			return nil, fmt.Errorf("preparing the MySQL storage: %v", redactErr(err, c.Endpoint))
		}
		backend = exactStart{backend}
	}
	if err := backend.Start(bctx); err != nil {
		cancel()
		return nil, fmt.Errorf("starting the SQL storage: %v", redactErr(err, c.Endpoint))
	}
	g := grpc.NewServer(
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
		// The API server's largest request (1.5 MiB objects) with room for framing.
		grpc.MaxRecvMsgSize(2*1024*1024+512*1024),
		grpc.MaxSendMsgSize(1<<31-1),
	)
	server.New(backend, "unix", 5*time.Second, "3.6.13").Register(g)
	if err := os.Remove(c.Socket); err != nil && !os.IsNotExist(err) {
		cancel()
		return nil, err
	}
	l, err := net.Listen("unix", c.Socket)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("listening on %s: %w", c.Socket, err)
	}
	if err := os.Chmod(c.Socket, 0o600); err != nil {
		l.Close()
		cancel()
		return nil, err
	}
	s := &Server{grpc: g, cancel: cancel, wg: wg, url: "unix://" + c.Socket}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := g.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			klog.ErrorS(err, "The SQL storage's etcd API stopped")
		}
	}()
	klog.FromContext(ctx).Info("SQL storage serving the etcd API", "socket", c.Socket, "backend", strings.SplitN(c.Endpoint, "://", 2)[0])
	return s, nil
}

// URL is the etcd endpoint the storage is served at.
func (s *Server) URL() string { return s.url }

// Close stops serving (waiting a moment for requests in flight) and
// closes the database.
func (s *Server) Close() {
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		s.grpc.Stop()
	}
	s.cancel()
	s.wg.Wait()
}

// binaryKeys makes the key column of kine's table on MySQL compare bytes,
// as etcd's keys do. kine creates it as VARCHAR in the character set
// ascii, whose default collation ignores case and trailing spaces: there,
// keys differing in case only (ClusterRoles "Admin" and "admin") or in a
// trailing space would be one key, and a range of keys would not be the
// range of bytes the API server and Milo's key-range work read and purge.
// The column is made VARBINARY of the same length once, when it is not.
func binaryKeys(ctx context.Context, dsn string) error {
	config, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	connector, err := mysql.NewConnector(config)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var dataType string
	if err := db.QueryRowContext(ctx, `SELECT data_type FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = 'kine' AND column_name = 'name'`).Scan(&dataType); err != nil {
		return fmt.Errorf("reading the type of kine's keys: %w", err)
	}
	if strings.EqualFold(dataType, "varbinary") {
		return nil
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE kine MODIFY name VARBINARY(630)`); err != nil {
		return fmt.Errorf("making kine's keys compare as bytes (%s to VARBINARY): %w", dataType, err)
	}
	return nil
}

// exactStart keeps kine's MySQL driver from reading "key\x00", the first
// key after key (where a paged list goes on), as "key#": that skips the
// keys that continue key with a byte below '#' (a space, '!'). It asks
// for "key\x01" instead, the same bound for keys without NUL bytes, which
// no key holds. PostgreSQL's driver reads it as "key\x1a", exact as well.
type exactStart struct{ server.Backend }

func (b exactStart) List(ctx context.Context, key, end string, limit, revision int64, keysOnly bool) (int64, []*server.KeyValue, error) {
	return b.Backend.List(ctx, after(key), end, limit, revision, keysOnly)
}

func (b exactStart) Count(ctx context.Context, key, end string, revision int64) (int64, int64, error) {
	return b.Backend.Count(ctx, after(key), end, revision)
}

func after(key string) string {
	if k, ok := strings.CutSuffix(key, "\x00"); ok {
		return k + "\x01"
	}
	return key
}

// redactErr is err's message with endpoint's password hidden.
func redactErr(err error, endpoint string) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(endpoint, "mysql://"); ok {
		if c, perr := mysql.ParseDSN(rest); perr == nil && c.Passwd != "" {
			msg = strings.ReplaceAll(msg, c.Passwd, "xxxxx")
		}
		return msg
	}
	if u, perr := url.Parse(endpoint); perr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}
