// Command milo is Milo's single binary: the all-in-one control plane and its tools.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"           // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo"  // client-go metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"   // build info metric
	_ "k8s.io/component-base/metrics/prometheus/workqueue" // workqueue metrics
	_ "k8s.io/kubernetes/pkg/features"                     // Kubernetes feature gates
)

func init() {
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := &cobra.Command{
		Use:   "milo",
		Short: "Milo: a multi-tenant, Kubernetes-compatible control plane",
		Long: "Milo serves an Organization → Folder → Project hierarchy and an isolated Kubernetes-style\n" +
			"control plane for every project, from one process and one etcd.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(*cobra.Command, []string) {
			// The server's own loopback clients would otherwise log the warnings it sends itself.
			rest.SetDefaultWarningHandler(rest.NoWarnings{})
		},
	}
	root.AddCommand(newStartCommand(), newControllerManagerCommand(), newKubeconfigCommand(), newVersionCommand(), newEtcdCommand(), newMigrateCommand(), newBackupCommand(), newTopCommand())
	root.SetArgs(args)
	err := root.Execute()
	logs.FlushLogs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "milo: %v\n", err)
		return 1
	}
	return 0
}
