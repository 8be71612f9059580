package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"go.miloapis.com/milo/pkg/server"
	"go.miloapis.com/milo/pkg/storage/backup"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
)

// newBackupCommand saves and restores the storage of a Milo data directory.
func newBackupCommand() *cobra.Command {
	var dataDir, prefix string
	cmd := &cobra.Command{
		Use:   "backup (save | restore) --data-dir DIR FILE",
		Short: "Save every key of a Milo data directory's etcd to a file, or restore one into an empty data directory",
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", ".milo", "the Milo data directory")
	cmd.PersistentFlags().StringVar(&prefix, "etcd-prefix", "/registry", "the server's --etcd-prefix: what is saved")
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Save every key, as of one revision, to FILE: from the running server's embedded etcd, or with the server stopped",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := genericapiserver.SetupSignalContext()
			client, stop, err := dataDirClient(ctx, dataDir, true)
			if err != nil {
				return err
			}
			defer stop()
			tmp := args[0] + ".partial"
			f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			n, rev, err := backup.Save(ctx, client, prefix, f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(tmp) //nolint:errcheck
				return err
			}
			if err := os.Rename(tmp, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "saved %d keys at revision %d to %s\n", n, rev, args[0])
			return nil
		},
	}, &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore FILE into the data directory's etcd, which must be empty (a new data directory, its pki/ copied from the old one)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := genericapiserver.SetupSignalContext()
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := os.Stat(server.EtcdURLFile(dataDir)); err == nil {
				return fmt.Errorf("a server is running on %s: stop it, and restore into a new data directory", dataDir)
			}
			client, stop, err := dataDirClient(ctx, dataDir, false)
			if err != nil {
				return err
			}
			defer stop()
			n, err := backup.Restore(ctx, client, prefix, f)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %d keys into %s\n", n, dataDir)
			return nil
		},
	})
	return cmd
}

// dataDirClient reaches the embedded etcd of dataDir: the running server's
// when online and one runs, else one started here (the server stopped).
func dataDirClient(ctx context.Context, dataDir string, online bool) (*clientv3.Client, func(), error) {
	etcdConfig, files, err := server.DataDirEtcd(dataDir)
	if err != nil {
		return nil, nil, err
	}
	certs := etcdFlags{ca: files.CA.CertFile, cert: files.EtcdClient.CertFile, key: files.EtcdClient.KeyFile}
	if url, err := os.ReadFile(server.EtcdURLFile(dataDir)); err == nil && online {
		certs.servers = []string{strings.TrimSpace(string(url))}
		client, err := certs.client()
		if err != nil {
			return nil, nil, err
		}
		return client, func() { client.Close() }, nil
	}
	if _, err := os.Stat(filepath.Join(etcdConfig.Dir, "member")); online && errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s holds no etcd data", dataDir)
	}
	etcd, err := embeddedetcd.Start(ctx, *etcdConfig)
	if err != nil {
		return nil, nil, err
	}
	certs.servers = []string{etcd.ClientURL()}
	client, err := certs.client()
	if err != nil {
		etcd.Close()
		return nil, nil, err
	}
	return client, func() { client.Close(); etcd.Close() }, nil
}
