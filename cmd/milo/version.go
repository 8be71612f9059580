package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"go.miloapis.com/milo/pkg/version"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of milo and of the Kubernetes and etcd libraries it is built on",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			switch output {
			case "":
				fmt.Fprintln(cmd.OutOrStdout(), info.String())
			case "json":
				data, err := json.MarshalIndent(info, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(data))
			default:
				return fmt.Errorf("--output must be empty or json, not %q", output)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: empty for one line, or json")
	return cmd
}
