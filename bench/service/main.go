// Command service runs the sample service's reconciler (examples/widgets) for
// the scale benchmark, on Milo's provider (pkg/mcprovider, one shared cache)
// or, for comparison, on a naive provider that gives every project a cluster
// of its own (a cache, informers and watches per project): the design
// pkg/mcprovider exists to avoid. Both expose metrics and heap profiles on
// loopback for the harness.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mccontroller "sigs.k8s.io/multicluster-runtime/pkg/controller"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"go.miloapis.com/milo/examples/widgets/controller"
	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	miloclient "go.miloapis.com/milo/pkg/client"
	"go.miloapis.com/milo/pkg/mcprovider"
)

func main() {
	klog.InitFlags(nil)
	provider := flag.String("provider", "shared", "shared (pkg/mcprovider, projects engaged: the builder's For and Owns), sources (pkg/mcprovider, projects not engaged: the provider's Sources) or naive (a cluster per project)")
	metrics := flag.String("metrics-address", "127.0.0.1:0", "metrics endpoint")
	pprof := flag.String("pprof-address", "", "profiling endpoint")
	health := flag.String("health-address", "", "health endpoint (/healthz)")
	workers := flag.Int("workers", 4, "reconciles at once")
	flag.Parse()
	if err := run(*provider, *metrics, *pprof, *health, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
}

func run(providerName, metrics, pprof, health string, workers int) error {
	ctrl.SetLogger(klog.NewKlogr())
	// controller-runtime's --kubeconfig flag, else $KUBECONFIG.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, -1 // the workers bound what the service asks
	scheme, err := controller.Scheme()
	if err != nil {
		return err
	}
	if err := resourcemanagerv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	var provider multicluster.Provider
	var sources *mcprovider.Provider
	switch providerName {
	case "shared", "sources":
		p, err := mcprovider.New(cfg, mcprovider.Options{Scheme: scheme, DoNotEngage: providerName == "sources"})
		if err != nil {
			return err
		}
		provider = p
		if providerName == "sources" {
			sources = p
		}
	case "naive":
		provider = &naive{config: cfg, scheme: scheme, clusters: map[string]cluster.Cluster{}}
	default:
		return fmt.Errorf("--provider %q: shared, sources or naive", providerName)
	}
	mgr, err := mcmanager.New(cfg, provider, manager.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: metrics}, PprofBindAddress: pprof, HealthProbeBindAddress: health})
	if err != nil {
		return err
	}
	if health != "" {
		if err := mgr.AddHealthzCheck("ping", func(_ *http.Request) error { return nil }); err != nil {
			return err
		}
	}
	r := &controller.Reconciler{Options: mccontroller.Options{MaxConcurrentReconciles: workers}, Sources: sources}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// naiveEngaged counts the projects the naive provider has engaged, so that
// the harness can wait for all of them before it times Widgets.
var naiveEngaged = prometheus.NewGauge(prometheus.GaugeOpts{Name: "bench_service_engaged_projects",
	Help: "Projects the naive provider has engaged (a cache synced and the controllers engaged)."})

func init() { crmetrics.Registry.MustRegister(naiveEngaged) }

// naive gives every Ready project a cluster of its own: a controller-runtime
// cluster on the project's URL, with its own cache, informers and watches.
type naive struct {
	config *rest.Config
	scheme *runtime.Scheme

	mu       sync.Mutex
	clusters map[string]cluster.Cluster
}

func (n *naive) Get(_ context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.clusters[string(name)]; ok {
		return c, nil
	}
	return nil, multicluster.ErrClusterNotFound
}

func (n *naive) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	return nil
}

func (n *naive) Start(ctx context.Context, aware multicluster.Aware) error {
	projects, err := crcache.New(n.config, crcache.Options{Scheme: n.scheme})
	if err != nil {
		return err
	}
	go func() { _ = projects.Start(ctx) }()
	inf, err := projects.GetInformer(ctx, &resourcemanagerv1alpha1.Project{})
	if err != nil {
		return err
	}
	engage := func(obj any) {
		p, ok := obj.(*resourcemanagerv1alpha1.Project)
		if !ok || p.DeletionTimestamp != nil {
			return
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == resourcemanagerv1alpha1.ConditionReady && c.Status == metav1.ConditionTrue)
		}
		n.mu.Lock()
		_, engaged := n.clusters[p.Name]
		n.mu.Unlock()
		if !ready || engaged {
			return
		}
		cl, err := cluster.New(miloclient.ProjectConfig(n.config, p.Name), func(o *cluster.Options) { o.Scheme = n.scheme })
		if err != nil {
			klog.ErrorS(err, "Making a project's cluster", "project", p.Name)
			return
		}
		go func() { _ = cl.Start(ctx) }()
		n.mu.Lock()
		n.clusters[p.Name] = cl
		n.mu.Unlock()
		go func() {
			if !cl.GetCache().WaitForCacheSync(ctx) {
				return
			}
			if err := aware.Engage(ctx, multicluster.ClusterName(p.Name), cl); err != nil {
				klog.ErrorS(err, "Engaging a project", "project", p.Name)
				return
			}
			naiveEngaged.Inc()
		}()
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: engage, UpdateFunc: func(_, o any) { engage(o) }}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
