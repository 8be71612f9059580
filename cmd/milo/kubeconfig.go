package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"go.miloapis.com/milo/pkg/kubeconfig"
)

func newKubeconfigCommand() *cobra.Command {
	var (
		target      kubeconfig.Target
		fromContext string
		merge, use  bool
	)
	paths := clientcmd.NewDefaultPathOptions()
	cmd := &cobra.Command{
		Use:   "kubeconfig (--project NAME | --organization NAME)",
		Short: "Write a kubeconfig, or add a context, for a project or an organization",
		Long: "Derive a kubeconfig context for a project's control plane or an organization's context from an\n" +
			"existing context: the same server and credentials, the URL of the project or organization.\n\n" +
			"By default the result is printed as a standalone kubeconfig:\n" +
			"  milo kubeconfig --project web > web.kubeconfig\n" +
			"With --merge the context (project-NAME or organization-NAME) is added to your kubeconfig,\n" +
			"so moving between projects is `kubectl config use-context project-NAME`; --use also switches to it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if use && !merge {
				return errors.New("--use needs --merge")
			}
			cfg, err := paths.GetStartingConfig()
			if err != nil {
				return fmt.Errorf("reading kubeconfig: %w", err)
			}
			name, err := kubeconfig.Derive(cfg, fromContext, target)
			if err != nil {
				return err
			}
			if merge {
				if use {
					cfg.CurrentContext = name
				}
				if err := clientcmd.ModifyConfig(paths, *cfg, true); err != nil {
					return fmt.Errorf("writing kubeconfig: %w", err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "Context %q added. Switch to it with: kubectl config use-context %s\n", name, name)
				return nil
			}
			only, err := kubeconfig.Only(cfg, name)
			if err != nil {
				return err
			}
			data, err := clientcmd.Write(*only)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&target.Project, "project", "", "Project whose control plane the context points at.")
	f.StringVar(&target.Organization, "organization", "", "Organization whose context the context points at.")
	f.StringVar(&paths.LoadingRules.ExplicitPath, "kubeconfig", "", "Kubeconfig to read (and with --merge, write); default $KUBECONFIG or ~/.kube/config.")
	f.StringVar(&fromContext, "context", "", "Context to derive from; default the current context.")
	f.BoolVar(&merge, "merge", false, "Add the context to the kubeconfig instead of printing a standalone one.")
	f.BoolVar(&use, "use", false, "With --merge, also make the new context current.")
	return cmd
}
