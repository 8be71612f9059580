package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	"k8s.io/apimachinery/pkg/runtime"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	componentbaseoptions "k8s.io/component-base/config/options"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/tracing"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers"
	hierarchycontrollers "go.miloapis.com/milo/pkg/controllers/hierarchy"
	"go.miloapis.com/milo/pkg/controllers/manager"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/version"
)

func newControllerManagerCommand() *cobra.Command {
	var (
		kubeconfigPath, kubeContext string
		workers                     int
		healthAddress               string
		profiling                   bool
		tracingConfig               string
	)
	selection := manager.Selection{"*"}
	leaderElection := hierarchycontrollers.DefaultLeaderElection()
	var fss cliflag.NamedFlagSets
	cmd := &cobra.Command{
		Use:   "controller-manager --kubeconfig FILE",
		Short: "Run the Organization, Folder and Project controllers against a Milo server",
		Long: "Run Milo's hierarchy controllers as their own process. Instances elect one leader through the Lease\n" +
			"milo-system/milo-controller-manager, which the controllers inside `milo start` join as well, so any\n" +
			"number may run at once. The identity in --kubeconfig must be a platform superuser (system:masters):\n" +
			"the controllers bootstrap projects before they are open to anyone else.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kubeconfigPath == "" {
				return errors.New("--kubeconfig is required")
			}
			config, err := controllerManagerConfig(kubeconfigPath, kubeContext)
			if err != nil {
				return err
			}
			klog.InfoS("Starting Milo controller manager", "version", version.Get().String(), "server", config.Host)

			ctx := genericapiserver.SetupSignalContext()
			if tracingConfig != "" {
				tp, err := startTracing(ctx, tracingConfig)
				if err != nil {
					return err
				}
				defer tp.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck
				// Reconciles are spans of their own; the server's request
				// spans hang below them.
				otel.SetTracerProvider(tp)
				config.Wrap(tracing.WrapperFor(tp))
			}
			factory, err := hierarchy.NewInformerFactory(config)
			if err != nil {
				return err
			}
			// The CA this kubeconfig trusts is the one published in every namespace.
			withCA := rest.CopyConfig(config)
			if err := rest.LoadTLSFiles(withCA); err != nil {
				return err
			}
			mgr, err := manager.New(controllers.Registry(), selection, manager.Shared{Config: config, Hierarchy: factory, Workers: workers, RootCA: withCA.CAData})
			if err != nil {
				return err
			}
			factory.Start(ctx.Done())
			if healthAddress != "" {
				if err := serveHealth(ctx, healthAddress, profiling); err != nil {
					return err
				}
			}
			klog.InfoS("Controllers", "names", mgr.Names())
			return hierarchycontrollers.RunElected(ctx, config, leaderElection, "", mgr.Run)
		},
	}
	fs := fss.FlagSet("controller manager")
	fs.StringVar(&kubeconfigPath, "kubeconfig", "", "Kubeconfig of the Milo server to manage (for example its admin.kubeconfig).")
	fs.StringVar(&kubeContext, "context", "", "Context of --kubeconfig to use; its current context when empty.")
	fs.IntVar(&workers, "workers", 16, "Objects of each kind worked on at once.")
	fs.Var(&selection, "controllers", "Controllers to run: '*' for all, a name to add one, '-name' to leave one out (known: "+
		strings.Join(controllers.Registry().Names(), ", ")+").")
	fs.StringVar(&healthAddress, "health-address", "127.0.0.1:10257", "Address of the plain-HTTP /healthz, /readyz and /metrics endpoints; empty disables them.")
	fs.StringVar(&tracingConfig, "tracing-config-file", "", "A TracingConfiguration (apiserver.config.k8s.io/v1) file, as `milo start` takes: each reconcile is exported as a span to its OTLP endpoint.")
	fs.BoolVar(&profiling, "profiling", false, "Also serve /debug/pprof on --health-address (unauthenticated, like the rest of it).")
	componentbaseoptions.BindLeaderElectionFlags(&leaderElection, fss.FlagSet("leader election"))
	globalflag.AddGlobalFlags(fss.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, name := range fss.Order {
		cmd.Flags().AddFlagSet(fss.FlagSets[name])
	}
	return cmd
}

// controllerManagerConfig is the client configuration of the controller
// manager: context kubeContext of the kubeconfig at path (its current one
// when empty).
func controllerManagerConfig(path, kubeContext string) (*rest.Config, error) {
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
		&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, err
	}
	config.UserAgent = "milo-controller-manager/" + version.Get().Milo
	// Built-in kinds read in protobuf, as kube-controller-manager reads
	// them: a kubeconfig asks for JSON, which the controllers' informers
	// decode several times slower, and which the server encodes once more
	// for these watches where its other watchers share one protobuf
	// encoding of each event. So are Milo's typed groups; custom resources,
	// which have no protobuf, are answered in JSON. Request bodies stay JSON.
	config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return config, nil
}

// startTracing reads a TracingConfiguration and starts its exporter.
func startTracing(ctx context.Context, file string) (tracing.TracerProvider, error) {
	cfg, err := genericoptions.ReadTracingConfiguration(file)
	if err != nil {
		return nil, fmt.Errorf("reading --tracing-config-file: %w", err)
	}
	return tracing.NewProvider(ctx, cfg, nil, []resource.Option{resource.WithAttributes(attribute.String("service.name", "milo-controller-manager"))})
}
