package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"go.miloapis.com/milo/pkg/server"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/storage/migration"
	"go.miloapis.com/milo/pkg/storage/sqlstorage"
)

// newMigrateCommand copies an etcd written by upstream Milo into Milo's
// storage: a data directory's embedded etcd, an etcd cluster or a SQL
// database (every server on it stopped).
func newMigrateCommand() *cobra.Command {
	var from, to etcdFlags
	var dataDir, storageBackend string
	c := migration.Config{ProjectsPrefix: "/projects", RegistryPrefix: "/registry", Scheme: legacyscheme.Scheme}
	cmd := &cobra.Command{
		Use:   "migrate --from-etcd URLS (--data-dir DIR | --storage-backend URL | --etcd-servers URLS)",
		Short: "Copy the objects of an etcd written by upstream Milo (per-project storage prefixes) into Milo's storage",
		Long: "Copy every object of an etcd written by upstream Milo into Milo's storage, in Milo's key layout: a\n" +
			"project's objects stamped with their project, each Project keeping its name as storage id. The target\n" +
			"is the embedded etcd of --data-dir, a SQL database (--storage-backend, as milo start takes it) or an\n" +
			"etcd cluster (--etcd-servers). The source is only read; objects already in the target are left as they\n" +
			"are, so running it again changes nothing. Stop every server of the target first. See docs/operations.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			targets := 0
			for _, set := range []bool{dataDir != "", storageBackend != "", len(to.servers) > 0} {
				if set {
					targets++
				}
			}
			if len(from.servers) == 0 || targets != 1 {
				return fmt.Errorf("--from-etcd and one of --data-dir, --storage-backend and --etcd-servers are required")
			}
			ctx := genericapiserver.SetupSignalContext()
			source, err := from.client()
			if err != nil {
				return err
			}
			defer source.Close()
			target, stop, err := migrationTarget(ctx, dataDir, storageBackend, to)
			if err != nil {
				return err
			}
			defer stop()
			report, err := migration.Run(ctx, keyranges.Etcd(source), target, c)
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%d projects, %d objects written, %d already there, %d keys skipped\n", len(report.Projects), report.Written, report.Present, len(report.Skipped))
			for _, key := range sortedSkipped(report.Skipped) {
				fmt.Fprintf(out, "  skipped %s: %s\n", key, report.Skipped[key])
			}
			if len(report.Skipped) > 50 {
				fmt.Fprintf(out, "  ... and %d more\n", len(report.Skipped)-50)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&from.servers, "from-etcd", nil, "the source etcd's endpoints")
	f.StringVar(&from.ca, "from-etcd-cafile", "", "CA verifying the source etcd")
	f.StringVar(&from.cert, "from-etcd-certfile", "", "client certificate for the source etcd")
	f.StringVar(&from.key, "from-etcd-keyfile", "", "its key")
	f.StringVar(&c.ProjectsPrefix, "from-projects-prefix", c.ProjectsPrefix, "where the source keeps projects' objects (/projects/<project>/...)")
	f.StringVar(&c.RegistryPrefix, "from-prefix", c.RegistryPrefix, "where the source keeps the platform's objects; Milo's --etcd-prefix")
	f.StringVar(&dataDir, "data-dir", "", "target: the Milo data directory whose embedded etcd to migrate into (its server stopped)")
	f.StringVar(&storageBackend, "storage-backend", "", "target: the SQL database Milo's servers run on (postgres://..., mysql://... or sqlite://PATH), as milo start --storage-backend takes it")
	f.StringSliceVar(&to.servers, "etcd-servers", nil, "target: the endpoints of the etcd cluster Milo's servers run on")
	f.StringVar(&to.ca, "etcd-cafile", "", "with --etcd-servers: the CA verifying it")
	f.StringVar(&to.cert, "etcd-certfile", "", "with --etcd-servers: the client certificate")
	f.StringVar(&to.key, "etcd-keyfile", "", "with --etcd-servers: its key")
	return cmd
}

// migrationTarget opens the storage to migrate into: a data directory's
// embedded etcd (started here), a SQL database (through kine started here,
// on a socket of its own) or an etcd cluster.
func migrationTarget(ctx context.Context, dataDir, storageBackend string, cluster etcdFlags) (keyranges.Store, func(), error) {
	switch {
	case dataDir != "":
		if _, err := os.Stat(server.EtcdURLFile(dataDir)); err == nil {
			return nil, nil, fmt.Errorf("a server is running on %s: stop it first", dataDir)
		}
		etcdConfig, files, err := server.DataDirEtcd(dataDir)
		if err != nil {
			return nil, nil, err
		}
		etcd, err := embeddedetcd.Start(ctx, *etcdConfig)
		if err != nil {
			return nil, nil, err
		}
		client, err := etcdFlags{servers: []string{etcd.ClientURL()}, ca: files.CA.CertFile, cert: files.EtcdClient.CertFile, key: files.EtcdClient.KeyFile}.client()
		if err != nil {
			etcd.Close()
			return nil, nil, err
		}
		return keyranges.Etcd(client), func() { client.Close(); etcd.Close() }, nil
	case storageBackend != "":
		dir, err := os.MkdirTemp("", "milo-migrate-")
		if err != nil {
			return nil, nil, err
		}
		kine, err := sqlstorage.Start(ctx, sqlstorage.Config{Endpoint: storageBackend, Socket: filepath.Join(dir, "kine.sock")})
		if err != nil {
			os.RemoveAll(dir) //nolint:errcheck
			return nil, nil, err
		}
		client, err := etcdFlags{servers: []string{kine.URL()}}.client()
		if err != nil {
			kine.Close()
			os.RemoveAll(dir) //nolint:errcheck
			return nil, nil, err
		}
		return keyranges.Kine(client), func() { client.Close(); kine.Close(); os.RemoveAll(dir) }, nil //nolint:errcheck
	default:
		client, err := cluster.client()
		if err != nil {
			return nil, nil, err
		}
		return keyranges.Etcd(client), func() { client.Close() }, nil
	}
}

// etcdFlags reach one etcd.
type etcdFlags struct {
	servers       []string
	ca, cert, key string
}

func (e etcdFlags) client() (*clientv3.Client, error) {
	return server.NewEtcdClient(storagebackend.TransportConfig{ServerList: e.servers, TrustedCAFile: e.ca, CertFile: e.cert, KeyFile: e.key})
}

// sortedSkipped lists at most 50 skipped keys, in order.
func sortedSkipped(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out[:min(len(out), 50)]
}
