package main

import (
	"fmt"
	"os"
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
)

// newMigrateCommand copies an etcd written by upstream Milo into a Milo
// data directory (the server stopped).
func newMigrateCommand() *cobra.Command {
	var from etcdFlags
	var dataDir string
	c := migration.Config{ProjectsPrefix: "/projects", RegistryPrefix: "/registry", Scheme: legacyscheme.Scheme}
	cmd := &cobra.Command{
		Use:   "migrate --from-etcd URLS --data-dir DIR",
		Short: "Copy the objects of an etcd written by upstream Milo (per-project storage prefixes) into a Milo data directory",
		Long: "Copy every object of an etcd written by upstream Milo into the embedded etcd of --data-dir, in Milo's\n" +
			"key layout: a project's objects stamped with their project, each Project keeping its name as storage id.\n" +
			"The source is only read; objects already in the target are left as they are, so running it again\n" +
			"changes nothing. Stop the server of --data-dir first. See docs/operations.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(from.servers) == 0 || dataDir == "" {
				return fmt.Errorf("--from-etcd and --data-dir are required")
			}
			if _, err := os.Stat(server.EtcdURLFile(dataDir)); err == nil {
				return fmt.Errorf("a server is running on %s: stop it first", dataDir)
			}
			ctx := genericapiserver.SetupSignalContext()
			source, err := from.client()
			if err != nil {
				return err
			}
			defer source.Close()
			etcdConfig, files, err := server.DataDirEtcd(dataDir)
			if err != nil {
				return err
			}
			etcd, err := embeddedetcd.Start(ctx, *etcdConfig)
			if err != nil {
				return err
			}
			defer etcd.Close()
			target, err := etcdFlags{servers: []string{etcd.ClientURL()}, ca: files.CA.CertFile, cert: files.EtcdClient.CertFile, key: files.EtcdClient.KeyFile}.client()
			if err != nil {
				return err
			}
			defer target.Close()
			report, err := migration.Run(ctx, keyranges.Etcd(source), keyranges.Etcd(target), c)
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
	f.StringVar(&dataDir, "data-dir", "", "the Milo data directory to migrate into (its server stopped)")
	return cmd
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
