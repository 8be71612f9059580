// Package server assembles Milo's API server from the Kubernetes generic control
// plane, apiextensions and the aggregator, and runs it with an embedded etcd.
//
// The flow follows the kube-apiserver idiom: Options (flags, Complete, Validate)
// → Config (NewConfig) → CompletedConfig → Server (NewServer) → Run.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/notfoundhandler"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	servicesv1alpha1 "go.miloapis.com/milo/pkg/apis/services/v1alpha1"
	"go.miloapis.com/milo/pkg/catalog"
	"go.miloapis.com/milo/pkg/controllers"
	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/crdcleanup"
	hierarchycontrollers "go.miloapis.com/milo/pkg/controllers/hierarchy"
	"go.miloapis.com/milo/pkg/controllers/manager"
	"go.miloapis.com/milo/pkg/fairness"
	"go.miloapis.com/milo/pkg/iam/authz"
	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/projectbootstrap"
	"go.miloapis.com/milo/pkg/quota"
	"go.miloapis.com/milo/pkg/registry"
	quotaregistry "go.miloapis.com/milo/pkg/registry/quota"
	"go.miloapis.com/milo/pkg/registry/resourcemanager"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/storage/sqlstorage"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/telemetry"
	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/typedinformer"
)

// Server is Milo's assembled API server, not yet running.
type Server struct {
	// Aggregator is the outermost server of the delegation chain; it serves everything.
	Aggregator *aggregatorapiserver.APIAggregator
	options    CompletedOptions
}

// NewServer wires the delegation chain: aggregator → built-in APIs → CRDs → 404,
// and registers Milo's post-start hooks.
func NewServer(c CompletedConfig) (*Server, error) {
	var notFound http.Handler = notfoundhandler.New(c.ControlPlane.Generic.Serializer, genericapifilters.NoMuxAndDiscoveryIncompleteKey)
	// Projects' own CRDs are served where the platform's CRD handler finds no CRD of the name.
	projectCRDs, err := newProjectCRDServing(c)
	if err != nil {
		return nil, err
	}
	if projectCRDs != nil {
		notFound = projectCRDs.Handler(notFound)
	}
	apiExtensions, err := c.APIExtensions.New(genericapiserver.NewEmptyDelegateWithCustomHandler(notFound))
	if err != nil {
		return nil, fmt.Errorf("creating apiextensions server: %w", err)
	}
	crdAPIEnabled := c.APIExtensions.GenericConfig.MergedResourceConfig.ResourceEnabled(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	// Projects' instances of a deleted CRD go with it (the apiserver removes only the platform's).
	crdClient, err := apiextensionsclient.NewForConfig(c.ControlPlane.Generic.LoopbackClientConfig)
	if err != nil {
		return nil, err
	}
	crdCleanup, err := crdcleanup.New(apiExtensions.Informers.Apiextensions().V1().CustomResourceDefinitions(),
		crdClient.ApiextensionsV1().CustomResourceDefinitions(), c.Keys, c.Options.ControlPlane.Etcd.StorageConfig.Prefix)
	if err != nil {
		return nil, err
	}
	crdCleanup.Purged = c.Usage.Invalidate
	if err := apiExtensions.GenericAPIServer.AddPostStartHook("milo-crd-project-instances", func(ctx genericapiserver.PostStartHookContext) error {
		go crdCleanup.Run(ctx)
		return nil
	}); err != nil {
		return nil, err
	}
	if c.ProjectCRDs != nil {
		if err := apiExtensions.GenericAPIServer.AddPostStartHook("milo-project-crds", func(ctx genericapiserver.PostStartHookContext) error {
			if !c.ProjectCRDs.Run(ctx) && ctx.Err() == nil {
				return errors.New("the informer of projects' CRDs did not sync")
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}

	builtIn, err := c.ControlPlane.New("milo", apiExtensions.GenericAPIServer)
	if err != nil {
		return nil, fmt.Errorf("creating control plane server: %w", err)
	}
	client, err := kubernetes.NewForConfig(c.ControlPlane.Generic.LoopbackClientConfig)
	if err != nil {
		return nil, err
	}
	providers, err := c.ControlPlane.GenericStorageProviders(client.Discovery())
	if err != nil {
		return nil, fmt.Errorf("creating storage providers: %w", err)
	}
	hierarchyStorage := func(resource string, storage *typedgroup.REST) { c.Hierarchy.UseStorage(resource, storage) }
	// The quota ledger reads the quota kinds kept per consumer or charged
	// object in-process (runQuota).
	quotaStorage := map[string]typedinformer.Storage{}
	typed := []controlplaneapiserver.RESTStorageProvider{resourcemanager.StorageProvider(hierarchyStorage, c.bootstrapProject()),
		quotaregistry.StorageProvider(func(resource string, storage *typedgroup.REST) { quotaStorage[resource] = storage })}
	if err := builtIn.InstallAPIs(storageProviders(append(providers, typed...), c.Tenant)...); err != nil {
		return nil, fmt.Errorf("installing built-in APIs: %w", err)
	}

	priorities := controlplaneapiserver.DefaultGenericAPIServicePriorities()
	// The groups served from typed storage get the APIServices their CRDs
	// had (listed in /apis, after the built-in groups).
	for _, g := range registry.Groups {
		priorities[g.Version] = controlplaneapiserver.APIServicePriority{Group: 1000, Version: 100}
	}
	aggregator, err := controlplaneapiserver.CreateAggregatorServer(c.Aggregator, builtIn.GenericAPIServer,
		apiExtensions.Informers.Apiextensions().V1().CustomResourceDefinitions(), crdAPIEnabled, priorities)
	if err != nil {
		return nil, fmt.Errorf("creating aggregator: %w", err)
	}

	loopback := aggregator.GenericAPIServer.LoopbackClientConfig
	if c.Options.ProjectFlows && c.ControlPlane.Generic.FlowControl != nil {
		if err := aggregator.GenericAPIServer.AddPostStartHook("milo-project-flows", func(ctx genericapiserver.PostStartHookContext) error {
			client, err := kubernetes.NewForConfig(loopback)
			if err != nil {
				return err
			}
			err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
				lists := fairness.Lists{Concurrency: c.Options.ProjectListConcurrency,
					ServerConcurrency: c.ControlPlane.Generic.MaxRequestsInFlight + c.ControlPlane.Generic.MaxMutatingRequestsInFlight}
				if err := fairness.Ensure(ctx, client, lists); err != nil {
					klog.FromContext(ctx).Info("Waiting to configure the projects' priority level", "err", err)
					return false, nil
				}
				return true, nil
			})
			if ctx.Err() != nil {
				return nil // stopping
			}
			return err
		}); err != nil {
			return nil, err
		}
	}

	// Milo's start-up jobs are post-start hooks, one per job, so that /readyz
	// names the one that has not finished. The apiserver runs hooks at once;
	// stages order those that depend on another's work.
	tree := c.Hierarchy
	crdsInstalled, informersSynced, rolesBootstrapped, quotaLoaded := newStage(), newStage(), newStage(), newStage()
	hooks := []struct {
		name string
		run  func(ctx genericapiserver.PostStartHookContext) error
	}{
		{"milo-install-crds", func(ctx genericapiserver.PostStartHookContext) error {
			if err := InstallCRDs(ctx, loopback); err != nil {
				return err
			}
			crdsInstalled.done()
			return nil
		}},
		// Hierarchy admission, the tenant router, Milo IAM and the controllers
		// read the hierarchy's informers, which need the CRDs.
		{"milo-hierarchy-and-iam-informers", func(ctx genericapiserver.PostStartHookContext) error {
			if !crdsInstalled.wait(ctx) {
				return nil
			}
			iamSynced, err := authz.Sync(c.IAM, tree.Factory())
			if err != nil {
				return err
			}
			iamSynced = append(iamSynced, c.Users.Informer(tree.Factory()))
			if !tree.Run(ctx) || !cache.WaitForCacheSync(ctx.Done(), iamSynced...) {
				return errors.New("hierarchy and IAM informers did not sync")
			}
			c.IAM.Registered().MarkSynced()
			informersSynced.done()
			return nil
		}},
		// The service catalog's index: until it has synced, tenants' resource
		// requests answer 503 (the router cannot tell what Services hide).
		{"milo-service-catalog", func(ctx genericapiserver.PostStartHookContext) error {
			if !crdsInstalled.wait(ctx) {
				return nil
			}
			services, apiServices, activations, err := catalogInformers(loopback)
			if err != nil {
				return err
			}
			crds := apiExtensions.Informers.Apiextensions().V1().CustomResourceDefinitions().Informer()
			go services.RunWithContext(ctx)
			go apiServices.RunWithContext(ctx)
			go activations.RunWithContext(ctx)
			if !c.Catalog.Run(ctx, services, crds, apiServices, activations) && ctx.Err() == nil {
				return errors.New("the service catalog's informers did not sync")
			}
			return nil
		}},
		// Provider quotas and project suspensions: until their indexes hold
		// what is stored, the creates they govern answer 503.
		{"milo-quota", func(ctx genericapiserver.PostStartHookContext) error {
			if !informersSynced.wait(ctx) {
				return nil
			}
			if err := runQuota(ctx, loopback, quotaStorage, tree, c.Options.Quota, c.Usage, c.Options.Suspensions, c.Joints); err != nil {
				return err
			}
			quotaLoaded.done()
			return nil
		}},
		{"milo-iam-roles", func(ctx genericapiserver.PostStartHookContext) error {
			if !informersSynced.wait(ctx) {
				return nil
			}
			if err := authz.Bootstrap(ctx, loopback); err != nil {
				return fmt.Errorf("bootstrapping IAM roles: %w", err)
			}
			rolesBootstrapped.done()
			return nil
		}},
		{"milo-project-purger", func(ctx genericapiserver.PostStartHookContext) error {
			if !informersSynced.wait(ctx) {
				return nil
			}
			purger, err := hierarchycontrollers.NewPurger(loopback, tree.Factory(), c.purgeProject)
			if err != nil {
				return err
			}
			go purger.Run(ctx, 4)
			return nil
		}},
		{"milo-user-recorder", func(ctx genericapiserver.PostStartHookContext) error {
			if !informersSynced.wait(ctx) {
				return nil
			}
			client, err := dynamic.NewForConfig(loopback)
			if err != nil {
				return err
			}
			go c.Users.Run(ctx, client)
			return nil
		}},
		{"milo-top-projects", func(ctx genericapiserver.PostStartHookContext) error {
			if c.Top == nil || !informersSynced.wait(ctx) {
				return nil
			}
			n := c.Options.TopProjects.N
			go c.Top.CountStoredEvery(ctx, c.Options.TopProjects.StoredInterval, func(ctx context.Context) (map[string]int64, error) {
				byID, err := tenantstorage.StoredObjectsByProject(ctx, c.Keys, c.Prefixes, tree.ProjectIDs())
				if err != nil {
					return nil, err
				}
				// Keys of a project the cache does not know (being
				// purged) do not take a place in the list.
				names := tree.ProjectNames(byID)
				byName := make(map[string]int64, len(names))
				for id, name := range names {
					byName[name] = byID[id]
				}
				return telemetry.Largest(byName, n), nil
			})
			return nil
		}},
		{"milo-controllers", func(ctx genericapiserver.PostStartHookContext) error {
			if len(c.Options.Controllers) == 0 {
				return nil
			}
			// The controllers' creates are charged like anyone's: not before
			// the quota ledger holds what is stored.
			if !rolesBootstrapped.wait(ctx) || !quotaLoaded.wait(ctx) {
				return nil
			}
			rootCA, err := servingCA(c.Options.AdminKubeconfig)
			if err != nil {
				return err
			}
			// The controllers leave what nothing holds to a purge conditional
			// on the project's key ranges, which only etcd can make; on SQL
			// they empty a project through the API and the Purger purges it.
			purge := c.purgeProjectSince
			if c.Keys == nil || !keyranges.ComparesRanges(c.Keys) {
				purge = nil
			}
			mgr, err := manager.New(controllers.Registry(), c.Options.Controllers, manager.Shared{Config: loopback, Hierarchy: tree.Factory(), Workers: 16, RootCA: rootCA,
				StoredByResource: c.storedByResource(), Purge: purge, OrganizationGone: c.organizationGone()})
			if err != nil {
				return err
			}
			// Starts the informers the controllers added; those already running stay as they are.
			tree.Factory().Start(ctx.Done())
			identity, err := controllerIdentity(c.Options.DataDir)
			if err != nil {
				return err
			}
			go func() {
				if err := hierarchycontrollers.RunElected(ctx, loopback, hierarchycontrollers.DefaultLeaderElection(), identity, mgr.Run); err != nil {
					klog.FromContext(ctx).Error(err, "Hierarchy controllers stopped")
				}
			}()
			return nil
		}},
	}
	for _, h := range hooks {
		if err := aggregator.GenericAPIServer.AddPostStartHook(h.name, h.run); err != nil {
			return nil, err
		}
	}
	if c.Top != nil {
		// A non-resource path of the platform: authorized like /metrics.
		aggregator.GenericAPIServer.Handler.NonGoRestfulMux.Handle(TopProjectsPath, c.Top)
	}
	return &Server{Aggregator: aggregator, options: c.Options}, nil
}

// TopProjectsPath serves the heaviest projects (telemetry.Report; a table
// with ?format=table).
const TopProjectsPath = "/milo/top-projects"

// EtcdURLFile is the file in dataDir naming the client URL of the running
// server's embedded etcd (its ports change at every start).
func EtcdURLFile(dataDir string) string { return filepath.Join(dataDir, "etcd.url") }

// Run starts the embedded etcd (unless an external one is configured), builds and
// runs the API server until ctx is cancelled, then shuts both down in order.
func Run(ctx context.Context, opts CompletedOptions, out io.Writer) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	if opts.SQL != nil {
		sql, err := sqlstorage.Start(ctx, *opts.SQL)
		if err != nil {
			return err
		}
		// Closed after the API server stopped, so that in-flight writes finish.
		defer sql.Close()
	}
	if opts.Etcd != nil {
		etcd, err := embeddedetcd.Start(ctx, *opts.Etcd)
		if err != nil {
			return err
		}
		// Closed after the API server stopped, so that in-flight writes finish.
		defer etcd.Close()
		if opts.EtcdInProcessOn == EtcdInProcessReads || opts.EtcdInProcessOn == EtcdInProcessAll {
			opts.EtcdInProcess = etcd.InProcessClient
		}
		// Where the running member is, for `milo backup save`.
		urlFile := EtcdURLFile(opts.DataDir)
		if err := os.WriteFile(urlFile, []byte(etcd.ClientURL()+"\n"), 0o600); err != nil {
			return err
		}
		defer os.Remove(urlFile) //nolint:errcheck
		go func() {
			if err, ok := <-etcd.Err(); ok && err != nil {
				cancel(fmt.Errorf("embedded etcd failed: %w", err))
			}
		}()
	}

	cfg, err := NewConfig(opts)
	if err != nil {
		return err
	}
	srv, err := NewServer(cfg.Complete())
	if err != nil {
		return err
	}
	prepared, err := srv.Aggregator.PrepareRun()
	if err != nil {
		return err
	}
	go announceReady(ctx, opts, srv.Aggregator.GenericAPIServer.LoopbackClientConfig, out)

	if err := prepared.Run(ctx); err != nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// announceReady tells the user, once /readyz passes, where to find the admin
// kubeconfig and one command to try.
func announceReady(ctx context.Context, opts CompletedOptions, loopback *rest.Config, out io.Writer) {
	client, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		return
	}
	start := time.Now()
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var status int
		client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		return status == http.StatusOK, nil
	})
	if err != nil {
		return
	}
	klog.InfoS("Milo is ready", "url", opts.URL, "after", time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(out, "Milo is ready at %s\n  admin kubeconfig: %s\n  try: kubectl --kubeconfig %s api-resources\n",
		opts.URL, opts.AdminKubeconfig, opts.AdminKubeconfig)
}

// catalogInformers are the informers the service catalog's index reads:
// Services of the platform (whole: they are few), and ServiceActivations of
// every project (metadata only: one per enablement).
func catalogInformers(loopback *rest.Config) (services, apiServices, activations cache.SharedIndexInformer, err error) {
	dyn, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return nil, nil, nil, err
	}
	services = dynamicinformer.NewFilteredDynamicInformer(dyn, servicesv1alpha1.ServicesResource, "", 0, cache.Indexers{}, nil).Informer()
	apiServices = dynamicinformer.NewFilteredDynamicInformer(dyn, schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"},
		"", 0, cache.Indexers{}, nil).Informer()
	clients, err := allprojects.NewClients(loopback)
	if err != nil {
		return nil, nil, nil, err
	}
	meta, err := metadata.NewForConfigAndClient(clients.AllProjectsConfig(), clients.HTTPClient())
	if err != nil {
		return nil, nil, nil, err
	}
	activations = metadatainformer.NewFilteredMetadataInformer(meta, servicesv1alpha1.ActivationsResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	return services, apiServices, activations, activations.SetTransform(catalog.SlimActivation)
}

// controllerIdentity is the lease identity of the in-process controllers,
// kept in the data directory so that a restarted server leads again at once.
func controllerIdentity(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "controller-identity")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	id := hierarchycontrollers.NewIdentity()
	if err := pki.WriteFileAtomic(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("recording the controllers' identity: %w", err)
	}
	return id, nil
}

// servingCA is the CA bundle clients verify the server with: the one in the
// admin kubeconfig the server wrote (the loopback client trusts a certificate
// of its own instead).
func servingCA(adminKubeconfig string) ([]byte, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the serving CA from %s: %w", adminKubeconfig, err)
	}
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, err
	}
	return cfg.CAData, nil
}

// stage is a step of start-up other steps wait for.
type stage chan struct{}

func newStage() stage { return make(stage) }

func (s stage) done() { close(s) }

// wait reports whether the stage is done; false when the server stops first
// (the hook then returns without error: a failed hook is fatal).
func (s stage) wait(ctx context.Context) bool {
	select {
	case <-s:
		return true
	case <-ctx.Done():
		return false
	}
}

// bootstrapProject has a new Project's bootstrap (package projectbootstrap)
// stored in the transaction that creates the Project, so that it is created
// Ready with one write. It is nil — the controllers bootstrap each project —
// on SQL storage, which commits one key per transaction; where the
// bootstrap's resources or Projects are kept in another etcd, which that
// transaction does not reach; and where the serving CA the ConfigMaps
// publish cannot be read. A Project carrying a storage id of its own (only
// the server sets one, upgrading a data directory) is left to the
// controllers too.
func (c CompletedConfig) bootstrapProject() func(ctx context.Context, p *resourcemanagerv1alpha1.Project) bool {
	if c.Joints == nil {
		return nil
	}
	if tenantstorage.KeptElsewhere(c.EtcdElsewhere, resourcemanagerv1alpha1.Resource("projects")) ||
		slices.ContainsFunc(projectbootstrap.Resources(), func(r schema.GroupResource) bool { return tenantstorage.KeptElsewhere(c.EtcdElsewhere, r) }) {
		return nil
	}
	ca, err := servingCA(c.Options.AdminKubeconfig)
	if err != nil {
		klog.ErrorS(err, "New projects are left to the controllers to bootstrap")
		return nil
	}
	pem := string(ca)
	return func(ctx context.Context, p *resourcemanagerv1alpha1.Project) bool {
		j := tenantstorage.JointFrom(ctx)
		if j == nil || p.UID == "" || p.Annotations[tenancy.StorageIDAnnotation] != "" {
			return false
		}
		tenant := tenancy.Tenant{Kind: tenancy.Project, Name: p.Name, ID: tenancy.ProjectID(string(p.UID))}
		objects := projectbootstrap.Objects(pem)
		companions := make([]tenantstorage.Companion, len(objects))
		for i, o := range objects {
			companions[i] = tenantstorage.Companion{Resource: o.Resource, Object: o.Object, Tenant: tenant}
		}
		return j.Add(p.UID, companions, nil, nil)
	}
}

// purgeProject removes every key of the project with storage id projectID,
// the instances of its own CRDs too, whose storage may not be built.
func (c CompletedConfig) purgeProject(ctx context.Context, projectID string) error {
	return c.purgeProjectSince(ctx, projectID, 0)
}

// organizationGone is how the controllers in this server remove an
// organization's Projects' counts in storage once its Projects are gone
// (quota.ProjectsCountsPrefix), or nil where no server keeps them: no
// quota, or no count in storage (SQL).
func (c CompletedConfig) organizationGone() func(ctx context.Context, org string) error {
	if c.Joints == nil || c.Options.Quota == nil || c.Keys == nil {
		return nil
	}
	prefix := c.Options.ControlPlane.Etcd.StorageConfig.Prefix
	return func(ctx context.Context, org string) error {
		_, err := c.Keys.DeletePrefixes(ctx, quota.ProjectsCountsPrefix(prefix, org))
		return err
	}
}

// purgeProjectSince is purgeProject on the condition, when since is not 0,
// that none of the project's keys was written after revision since
// (tenantstorage.PurgeUnchanged).
func (c CompletedConfig) purgeProjectSince(ctx context.Context, projectID string, since int64) error {
	var own []string
	if c.ProjectCRDs != nil {
		own = c.ProjectCRDs.KeyPrefixes(projectID, c.Options.ControlPlane.Etcd.StorageConfig.Prefix)
	}
	_, err := tenantstorage.PurgeUnchanged(ctx, c.Keys, c.Prefixes, projectID, since, own...)
	return err
}

// storedByResource is how the controllers in this server count a project's
// objects per resource in storage, or nil where that would not be right or
// cheaper than reading the watch caches: on SQL, where each count is a
// query of its own. Resources kept in another etcd (--etcd-servers-overrides)
// are never counted: their keys are not in the storage counted.
func (c CompletedConfig) storedByResource() func(ctx context.Context, projectID string, resources []schema.GroupResource) (map[schema.GroupResource]int64, int64, error) {
	if c.Options.SQL != nil || c.Keys == nil {
		return nil
	}
	elsewhere, keys, prefixes := c.EtcdElsewhere, c.Keys, c.Prefixes
	return func(ctx context.Context, projectID string, resources []schema.GroupResource) (map[schema.GroupResource]int64, int64, error) {
		here := slices.DeleteFunc(slices.Clone(resources), func(r schema.GroupResource) bool { return tenantstorage.KeptElsewhere(elsewhere, r) })
		return tenantstorage.StoredByResource(ctx, keys, prefixes, projectID, here)
	}
}
