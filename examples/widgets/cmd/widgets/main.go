// Command widgets runs the sample service's controller against a Milo
// server: every Ready project's Widgets get their ConfigMaps.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"go.miloapis.com/milo/examples/widgets/controller"
	"go.miloapis.com/milo/pkg/mcprovider"
)

func main() {
	klog.InitFlags(nil)
	metrics := flag.String("metrics-bind-address", "127.0.0.1:8089", "address of the controller's metrics endpoint (0: none)")
	flag.Parse()
	if err := run(*metrics); err != nil {
		fmt.Fprintln(os.Stderr, "widgets:", err)
		os.Exit(1)
	}
}

func run(metrics string) error {
	ctrl.SetLogger(klog.NewKlogr())
	// controller-runtime's --kubeconfig flag, else $KUBECONFIG.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	scheme, err := controller.Scheme()
	if err != nil {
		return err
	}
	// Projects are not engaged: the controller watches every project through
	// the provider's Sources, with nothing per project but cached objects.
	provider, err := mcprovider.New(cfg, mcprovider.Options{Scheme: scheme, DoNotEngage: true})
	if err != nil {
		return err
	}
	mgr, err := mcmanager.New(cfg, provider, manager.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: metrics}})
	if err != nil {
		return err
	}
	if err := (&controller.Reconciler{Sources: provider}).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
