package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"go.miloapis.com/milo/pkg/server"
	"go.miloapis.com/milo/pkg/telemetry"
)

// newTopCommand reads a running server's heaviest-tenants report.
func newTopCommand() *cobra.Command {
	var kubeconfig string
	var asJSON bool
	cmd := &cobra.Command{
		Use:       "top projects",
		Short:     "Show the projects with the most requests per second and the most stored objects (the server's --top-projects)",
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"projects"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "projects" {
				return fmt.Errorf("milo top knows only projects, not %q", args[0])
			}
			cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
				&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, nil).ClientConfig()
			if err != nil {
				return err
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			body, err := client.Discovery().RESTClient().Get().AbsPath(server.TopProjectsPath).DoRaw(genericapiserver.SetupSignalContext())
			if err != nil {
				return fmt.Errorf("reading %s: %w", server.TopProjectsPath, err)
			}
			if asJSON {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			var r telemetry.Report
			if err := json.Unmarshal(body, &r); err != nil {
				return err
			}
			telemetry.WriteTable(cmd.OutOrStdout(), r)
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", filepath.Join(".milo", "admin.kubeconfig"), "a kubeconfig of the platform whose user may get the non-resource URL "+server.TopProjectsPath)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
