package main

import (
	"fmt"
	"net/url"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
)

// newEtcdCommand runs one member of an etcd cluster for Milo: the etcd
// library Milo embeds, as a process of its own, for trying replicas and
// storage failures on one machine (production runs etcd's own release).
func newEtcdCommand() *cobra.Command {
	var c embeddedetcd.Config
	var client, peer string
	cmd := &cobra.Command{
		Use:   "etcd --name NAME --data-dir DIR --listen-client-url URL --listen-peer-url URL --initial-cluster NAME=URL,...",
		Short: "Run one member of an etcd cluster (mutual TLS on both ports) for trying Milo replicas locally",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, u := range []struct {
				flag, value string
				into        *url.URL
			}{{"--listen-client-url", client, &c.ClientURL}, {"--listen-peer-url", peer, &c.PeerURL}} {
				parsed, err := url.Parse(u.value)
				if err != nil || parsed.Scheme != "https" || parsed.Host == "" {
					return fmt.Errorf("%s: %q is not an https URL", u.flag, u.value)
				}
				*u.into = *parsed
			}
			if c.Name == "" || c.Dir == "" || c.InitialCluster == "" || c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
				return fmt.Errorf("--name, --data-dir, --initial-cluster, --cert-file, --key-file and --trusted-ca-file are required")
			}
			c.StartTimeout = 5 * time.Minute
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			s, err := embeddedetcd.Start(ctx, c)
			if err != nil {
				return err
			}
			defer s.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "etcd member %s is serving at %s\n", c.Name, s.ClientURL())
			select {
			case <-ctx.Done():
				return nil
			case err := <-s.Err():
				return err
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Name, "name", "", "member name, as in --initial-cluster")
	f.StringVar(&c.Dir, "data-dir", "", "the member's data directory")
	f.StringVar(&client, "listen-client-url", "", "https URL to serve clients on (loopback)")
	f.StringVar(&peer, "listen-peer-url", "", "https URL to serve peers on (loopback)")
	f.StringVar(&c.InitialCluster, "initial-cluster", "", "every member: name=peer URL, comma-separated")
	f.StringVar(&c.CertFile, "cert-file", "", "certificate for both ports")
	f.StringVar(&c.KeyFile, "key-file", "", "its key")
	f.StringVar(&c.CAFile, "trusted-ca-file", "", "CA whose client and peer certificates are accepted")
	return cmd
}
