package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/server"
	"go.miloapis.com/milo/pkg/version"
)

func newStartCommand() *cobra.Command {
	opts := server.NewOptions()
	var fss cliflag.NamedFlagSets
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Run the all-in-one Milo control plane with an embedded etcd",
		Long: "Run Milo's API server, with an embedded single-node etcd unless --etcd-servers is given.\n" +
			"State lives in --data-dir: etcd data, generated certificates and admin.kubeconfig.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all, _ := cmd.Flags().GetBool("help-all"); all {
				printHelp(cmd.OutOrStdout(), cmd, fss, true)
				return nil
			}
			if err := logsapi.ValidateAndApply(opts.ControlPlane.Logs, utilfeature.DefaultFeatureGate); err != nil {
				return err
			}
			cliflag.PrintFlags(cmd.Flags())
			klog.InfoS("Starting Milo", "version", version.Get().String())

			ctx := genericapiserver.SetupSignalContext()
			completed, err := opts.Complete(ctx)
			if err != nil {
				return err
			}
			utilfeature.DefaultMutableFeatureGate.AddMetrics()
			return server.Run(ctx, completed, cmd.OutOrStdout())
		},
	}
	opts.AddFlags(&fss)
	globalflag.AddGlobalFlags(fss.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	fss.FlagSet("global").Bool("help-all", false, "Show every flag group, including the advanced apiserver flags.")
	for _, name := range fss.Order {
		cmd.Flags().AddFlagSet(fss.FlagSets[name])
	}
	cmd.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		all, _ := cmd.Flags().GetBool("help-all")
		printHelp(cmd.OutOrStdout(), cmd, fss, all)
	})
	cmd.SetUsageFunc(func(cmd *cobra.Command) error {
		printHelp(cmd.OutOrStderr(), cmd, fss, false)
		return nil
	})
	return cmd
}

// printHelp shows the flag groups an all-in-one user needs; the apiserver's many
// other groups stay usable and are listed by name, or shown in full with --help-all.
func printHelp(w io.Writer, cmd *cobra.Command, fss cliflag.NamedFlagSets, all bool) {
	cols, _, _ := term.TerminalSize(w)
	if cols <= 0 {
		cols = 100
	}
	fmt.Fprintf(w, "%s\n\nUsage:\n  %s [flags]\n", cmd.Long, cmd.CommandPath())
	var hidden []string
	for _, name := range fss.Order {
		if !all && !slices.Contains(server.PrimaryFlagGroups(), name) && name != "global" {
			hidden = append(hidden, name)
			continue
		}
		fmt.Fprintf(w, "\n%s flags:\n\n%s", cases(name), fss.FlagSets[name].FlagUsagesWrapped(cols))
	}
	if len(hidden) > 0 {
		fmt.Fprintf(w, "\nMore flag groups, accepted but not shown (see --help-all): %s\n", strings.Join(hidden, ", "))
	}
}

func cases(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
