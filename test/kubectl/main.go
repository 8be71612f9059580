// Command kubectl is the upstream kubectl, built from the k8s.io/kubectl module
// at the version Milo is built against, so end-to-end tests drive Milo with the
// real client users have.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	os.Exit(cli.Run(cmd.NewDefaultKubectlCommand()))
}
