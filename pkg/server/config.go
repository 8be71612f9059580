package server

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"go.opentelemetry.io/otel"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/webhook"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/metrics/legacyregistry"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/controlplane"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/catalog"
	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/iam/evaluator"
	"go.miloapis.com/milo/pkg/iam/projectrbac"
	"go.miloapis.com/milo/pkg/iam/users"
	"go.miloapis.com/milo/pkg/jsonkind"
	"go.miloapis.com/milo/pkg/projectbootstrap"
	"go.miloapis.com/milo/pkg/projectcrds"
	"go.miloapis.com/milo/pkg/quota"
	"go.miloapis.com/milo/pkg/registry"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/telemetry"
	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/tenantadmission"
	"go.miloapis.com/milo/pkg/tenantstate"
	"go.miloapis.com/milo/pkg/version"
)

// Config is the configuration of the three delegated servers that make up Milo's
// API: the aggregator (outermost), the generic control plane's built-in APIs, and
// apiextensions (CustomResourceDefinitions, innermost).
type Config struct {
	Options CompletedOptions
	Tenancy

	Aggregator    *aggregatorapiserver.Config
	ControlPlane  *controlplaneapiserver.Config
	APIExtensions *apiextensionsapiserver.Config
}

// Tenancy is the state Milo's tenancy seams share. None of it grows with the
// number of projects, except the Project index, which holds the platform's
// Project objects.
type Tenancy struct {
	// Prefixes records every resource's key prefix, for purging a project's keys.
	Prefixes *tenantstorage.Prefixes
	// Hierarchy is the one cache of Organizations, Folders and Projects, read by
	// admission, the tenant router and the hierarchy controllers.
	Hierarchy *hierarchy.Tree
	// Tenant is the one path by which admission, project RBAC and the project
	// token authenticator read a tenant's objects; the server installs the
	// core and RBAC storages into it as it builds them.
	Tenant *tenantstate.Reader
	// RBAC reads project RBAC objects through Tenant.
	RBAC *projectrbac.Storage
	// ProjectCRDs holds every project's own CRDs (nil without --project-crds):
	// their instances are served from it, projects' discovery lists them.
	ProjectCRDs *projectcrds.Index
	// Keys works on key ranges: quota counts and purges.
	Keys keyranges.Store
	// IAM makes Milo IAM's decisions; fed from informers once the CRDs exist.
	IAM *evaluator.Evaluator
	// Users records the identities that authenticate as User objects.
	Users *users.Recorder
	// Catalog says where the resources of Services are served: read by the
	// router, the all-projects view and admission; fed once the CRDs exist.
	Catalog *catalog.Catalog
	// Usage meters what projects store, for the built-in objects and bytes
	// per project quotas; the storage of every resource tells it of writes.
	Usage *quota.StorageMeter
	// Joints stores with a create, in the object's own etcd transaction,
	// its quota claims and a new project's bootstrap (nil on SQL storage,
	// which cannot).
	Joints *tenantstorage.Joints
	// EtcdElsewhere are the resources --etcd-servers-overrides keeps in
	// another etcd, which the server's own work on key ranges and
	// transactions of several keys (Keys, Joints) does not reach.
	// A resource of "*" stands for every resource of its group: look up
	// with tenantstorage.KeptElsewhere.
	EtcdElsewhere map[schema.GroupResource]bool
	// Top names the heaviest projects (nil with --top-projects=0).
	Top *telemetry.TopProjects
	// inProcess makes the storages of what the embedded etcd keeps on its
	// in-process client; nil without one.
	inProcess *inProcessEtcd
}

// CompletedConfig is a Config whose parts have been completed.
type CompletedConfig struct {
	Options CompletedOptions
	Tenancy
	Aggregator    aggregatorapiserver.CompletedConfig
	ControlPlane  controlplaneapiserver.CompletedConfig
	APIExtensions apiextensionsapiserver.CompletedConfig
}

// NewConfig builds the configuration of every server in the chain from the options.
func NewConfig(opts CompletedOptions) (*Config, error) {
	schemes := []*runtime.Scheme{legacyscheme.Scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme}
	resources := controlplane.DefaultGenericAPIResourceConfigSource()
	for _, g := range registry.Groups {
		resources.EnableVersions(g.Version)
	}
	generic, informers, storageFactory, err := controlplaneapiserver.BuildGenericConfig(
		opts.ControlPlane, schemes, resources, openAPIDefinitions)
	if err != nil {
		return nil, fmt.Errorf("building generic server config: %w", err)
	}
	// The kinds served from typed storage are stored under the keys they had
	// as custom resources, written in protobuf (or JSON, as asked) and read in
	// either. The kind of one stored as JSON is read from the first bytes
	// Milo wrote, not by a scan of every object read (jsonkind's
	// UniversalDeserializer, the storage's reader of what it did not write).
	typedCodecs := jsonkind.NewCodecFactory(legacyscheme.Scheme)
	for _, gr := range registry.Resources() {
		storageFactory.SetResourceEtcdPrefix(gr, typedgroup.KeyPrefix(gr))
		storageFactory.SetSerializer(gr, opts.TypedStorageMediaType, typedCodecs)
	}
	generic.OpenAPIConfig.GetDefinitionName = typedgroup.DefinitionName(registry.Groups, generic.OpenAPIConfig.GetDefinitionName)
	generic.OpenAPIV3Config.GetDefinitionName = typedgroup.DefinitionName(registry.Groups, generic.OpenAPIV3Config.GetDefinitionName)
	generic.EffectiveVersion = serverVersion{generic.EffectiveVersion}
	generic.OpenAPIConfig.Info.Title = "Milo"
	generic.OpenAPIV3Config.Info.Title = "Milo"
	tree := opts.Hierarchy
	if tree == nil {
		tree = &hierarchy.Tree{}
	}
	if opts.ControlPlane.Traces != nil && opts.ControlPlane.Traces.ConfigFile != "" {
		// Request spans carry their tenant; Milo's controllers trace their
		// work with the same exporter.
		otel.SetTracerProvider(generic.TracerProvider)
		generic.TracerProvider = telemetry.TenantTracing(generic.TracerProvider, tree.CachedOrganizationOf)
	}

	// Admission plugins answer for the request's tenant; they read a project's
	// namespaces through the namespace storage, captured when it is built.
	etcdClient, err := NewEtcdClient(opts.ControlPlane.Etcd.StorageConfig.Transport)
	if err != nil {
		return nil, err
	}
	var inProcess *inProcessEtcd
	if opts.EtcdInProcess != nil {
		inProcess = newInProcessEtcd(opts.EtcdInProcess(), opts.ControlPlane.Etcd.StorageConfig.Transport, opts.EtcdInProcessOn != EtcdInProcessAll)
	}
	if inProcess != nil {
		// Milo's own key reads (and, with writes in-process, its
		// transactions: a project's creation and purge, quota counts)
		// in-process too; its watches on gRPC.
		etcdClient.KV = inProcess.over(etcdClient.KV)
	}
	keys := keyRangesOf(etcdClient, opts.SQL != nil)
	if err := tenantstorage.UpgradeLayout(context.Background(), keys, opts.ControlPlane.Etcd.StorageConfig.Prefix); err != nil {
		return nil, err
	}
	if err := retireCRDs(context.Background(), keys, opts.ControlPlane.Etcd.StorageConfig.Prefix); err != nil {
		return nil, err
	}
	prefixes := tenantstorage.NewPrefixes()
	tenant := tenantstate.New()
	namespaces := tenantadmission.NewNamespaces(tenant)
	quotas := tenantadmission.NewQuotas(tenant, objectCounter(keys, prefixes), objectExists(keys, prefixes))
	genericAdmission := opts.ControlPlane.Admission.GenericAdmission
	selectors := tenantadmission.NewSelectors(namespaces)
	genericAdmission.Decorators = append(genericAdmission.Decorators, tenantadmission.Decorator(namespaces, quotas, selectors))

	services := webhook.NewDefaultServiceResolver()
	cp, admissionInitializers, err := controlplaneapiserver.CreateConfig(opts.ControlPlane, generic, informers, storageFactory, services, nil)
	if err != nil {
		return nil, fmt.Errorf("building control plane config: %w", err)
	}
	if err := configureSelectors(selectors, opts, cp, admissionInitializers); err != nil {
		return nil, fmt.Errorf("configuring admission for projects: %w", err)
	}
	authInfo := webhook.NewDefaultAuthenticationInfoResolverWrapper(cp.ProxyTransport, cp.Generic.EgressSelector, cp.Generic.LoopbackClientConfig, cp.Generic.TracerProvider)
	// One API server instance per etcd: the all-in-one runs a single one.
	apiExtensions, err := controlplaneapiserver.CreateAPIExtensionsConfig(*cp.Generic, cp.VersionedInformers, admissionInitializers, opts.ControlPlane, 1, services, authInfo)
	if err != nil {
		return nil, fmt.Errorf("building apiextensions config: %w", err)
	}
	aggregator, err := controlplaneapiserver.CreateAggregatorConfig(*cp.Generic, opts.ControlPlane, cp.VersionedInformers, services, cp.ProxyTransport, cp.Extra.PeerProxy, admissionInitializers)
	if err != nil {
		return nil, fmt.Errorf("building aggregator config: %w", err)
	}
	// The aggregator's handler chain is the one requests pass.
	aggregator.GenericConfig.AuditBackend = tenancy.AuditOnlyProjects(aggregator.GenericConfig.AuditBackend, opts.AuditProjects)
	// Remote APIServices are reached through Services, which Milo does not serve;
	// their availability is not checked by probing endpoints.
	aggregator.ExtraConfig.DisableRemoteAvailableConditionController = true

	c := &Config{Options: opts, Aggregator: aggregator, ControlPlane: cp, APIExtensions: apiExtensions, Tenancy: Tenancy{inProcess: inProcess,
		Prefixes: prefixes, Tenant: tenant, RBAC: projectrbac.NewStorage(tenant), Keys: keys,
		IAM: opts.IAM, Users: users.NewRecorder(), Catalog: opts.Catalog,
	}}
	overrides, err := genericoptions.ParseEtcdServersOverrides(opts.ControlPlane.Etcd.EtcdServersOverrides)
	if err != nil {
		return nil, err
	}
	c.EtcdElsewhere = map[schema.GroupResource]bool{}
	for _, o := range overrides {
		c.EtcdElsewhere[o.GroupResource] = true
	}
	if opts.SQL == nil {
		// Quota claims, and a new project's bootstrap, are stored with the
		// object whose create makes them.
		c.Joints = tenantstorage.NewJoints(etcdClient, append(projectbootstrap.Resources(), quotav1alpha1.ClaimsResource.GroupResource())...)
		c.Joints.Elsewhere(slices.Collect(maps.Keys(c.EtcdElsewhere))...)
		c.Joints.SetMaxTxnOps(opts.EtcdMaxTxnOps)
		// A create in a project requires, in its transaction, that the
		// project is not purged: one admitted before its project's
		// deletion cannot be stored after its purge.
		c.Joints.RequireLiveProjects(opts.ControlPlane.Etcd.StorageConfig.Prefix, resourcemanagerv1alpha1.Resource("projects"))
		// A claim stored with its object adds to its buckets' tallies;
		// its delete takes from them.
		c.Joints.Tallied(quotav1alpha1.ClaimsResource.GroupResource(), func(obj runtime.Object) ([]tenantstorage.Tally, string) { return quota.ClaimTallies(obj), "" })
	}
	if c.Catalog == nil {
		c.Catalog = &catalog.Catalog{}
	}
	if c.IAM == nil {
		c.IAM = evaluator.New()
	}
	// One server per process; a second (tests) keeps the first's collectors.
	_ = legacyregistry.CustomRegister(evaluator.NewIndexCollector(c.IAM))
	if top := opts.TopProjects; top.N > 0 {
		c.Top = telemetry.NewTopProjects(top.N, top.Window)
		_ = legacyregistry.CustomRegister(c.Top.Collector())
	}
	if opts.Quota != nil {
		storagePrefix := opts.ControlPlane.Etcd.StorageConfig.Prefix
		c.Usage = quota.NewStorageMeter(opts.Quota, func(ctx context.Context, projectID string, bytes bool) (quota.Usage, error) {
			var own []string
			if c.ProjectCRDs != nil {
				own = c.ProjectCRDs.KeyPrefixes(projectID, storagePrefix)
			}
			objects, size, err := tenantstorage.StoredUsage(ctx, keys, prefixes, projectID, bytes, own...)
			return quota.Usage{Objects: objects, Bytes: size}, err
		}, func(name string) string { return c.Hierarchy.CachedProjectID(name) })
		if c.Joints != nil {
			// On etcd a metered project's objects and bytes are counted in
			// storage, by every replica's creates, updates and deletes.
			c.Prefixes.KeepUsageTallies(storagePrefix)
			c.Usage.CountInStorage(quota.StorageCounts{
				Count: func(ctx context.Context, projectID, key, bytesKey string) (tenantstorage.Tally, tenantstorage.Tally, error) {
					var own []string
					if c.ProjectCRDs != nil {
						own = c.ProjectCRDs.KeyPrefixes(projectID, storagePrefix)
					}
					return tenantstorage.CountUsage(ctx, etcdClient, c.Prefixes, storagePrefix, projectID, key, bytesKey, own...)
				},
				Follow: func(ctx context.Context, seen func(projectID, epoch string, now tenantstorage.Tally)) {
					tenantstorage.FollowUsage(ctx, etcdClient, storagePrefix, seen)
				},
				Drop: func(ctx context.Context) error { return tenantstorage.DropUsage(ctx, etcdClient, storagePrefix) },
			})
			if projects := resourcemanagerv1alpha1.Resource("projects"); !tenantstorage.KeptElsewhere(c.EtcdElsewhere, projects) {
				// So is an organization's number of Projects, where a
				// grant limits it: every replica's Project creates and
				// deletes move its count.
				c.Joints.Tallied(projects, opts.Quota.CountProjectsInStorage(etcdClient, storagePrefix, func(ctx context.Context, org string) (int64, int64, error) {
					return c.Hierarchy.CountProjects(ctx, org)
				}))
			}
		}
	}
	makeStorageTenantKeyed(c, c.Prefixes)
	if opts.ProjectCRDs {
		clients, err := allprojects.NewClients(cp.Generic.LoopbackClientConfig)
		if err != nil {
			return nil, err
		}
		c.ProjectCRDs = opts.ProjectCRDIndex
		if c.ProjectCRDs == nil {
			c.ProjectCRDs = &projectcrds.Index{}
		}
		if err := c.ProjectCRDs.Init(clients); err != nil {
			return nil, err
		}
	}
	c.Hierarchy = tree
	if err := c.Hierarchy.Init(cp.Generic.LoopbackClientConfig); err != nil {
		return nil, err
	}
	if err := routeTenants(c, c.Hierarchy); err != nil {
		return nil, err
	}
	authorizeProjects(c)
	if err := authenticateTenants(c); err != nil {
		return nil, err
	}
	return c, nil
}

// Complete fills in the remaining defaults of every part.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{
		Options:       c.Options,
		Tenancy:       c.Tenancy,
		Aggregator:    c.Aggregator.Complete(),
		ControlPlane:  c.ControlPlane.Complete(),
		APIExtensions: c.APIExtensions.Complete(),
	}
}

// openAPIDefinitions are the built-in kinds' definitions and those of the
// groups served from typed storage.
func openAPIDefinitions(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
	defs := generatedopenapi.GetOpenAPIDefinitions(ref)
	for _, g := range registry.Groups {
		for name, def := range g.Definitions(ref) {
			// A group's definitions include the meta types they refer
			// to: the built-in ones are kept.
			if _, ok := defs[name]; !ok {
				defs[name] = def
			}
		}
	}
	return defs
}

// serverVersion answers /version with the Kubernetes version Milo serves and
// Milo's own as build metadata (version.ServerInfo).
type serverVersion struct {
	basecompatibility.EffectiveVersion
}

func (v serverVersion) Info() *apimachineryversion.Info {
	base := v.EffectiveVersion.Info()
	if base == nil {
		return nil
	}
	info := version.ServerInfo(*base)
	return &info
}
