package server

import (
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/registry/generic"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/util/keyutil"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/fairness"
	"go.miloapis.com/milo/pkg/growstack"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/iam/authz"
	"go.miloapis.com/milo/pkg/iam/projectrbac"
	"go.miloapis.com/milo/pkg/iam/satokens"
	"go.miloapis.com/milo/pkg/projectbootstrap"
	"go.miloapis.com/milo/pkg/registry"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/storage/watchcache"
	"go.miloapis.com/milo/pkg/telemetry"
	"go.miloapis.com/milo/pkg/tenancy"
)

// tenantRESTOptions makes every resource's storage tenant-keyed.
type tenantRESTOptions struct {
	inner    generic.RESTOptionsGetter
	prefixes *tenantstorage.Prefixes
	maxList  int64
	// uncached storage reads and watches etcd directly, without a watch cache.
	uncached bool
	// raw makes uncached storage; nil: upstream's, a client per storage.
	raw generic.StorageDecorator
	// inProcess makes storage in the embedded etcd on its in-process
	// client, cached and uncached (raw takes precedence); nil: none.
	inProcess *inProcessEtcd
	shown     tenantstorage.Shown
	meter     tenantstorage.Meter
	joints    *tenantstorage.Joints
	// maps is one set of shared annotations maps for every resource.
	maps *tenantstorage.TenancyMaps
	// revisions reads the keys and revisions of the storage the server
	// keeps its resources in (etcd or kine), against which their watch
	// caches are checked; elsewhere are the resources kept in another
	// etcd, checked by upstream's check.
	revisions watchcache.Revisions
	elsewhere map[schema.GroupResource]bool
}

func (g tenantRESTOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.inner.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	if watchcache.IsUpstreamCached(opts.Decorator) {
		o := watchcache.Options{PageSize: watchcache.FillPageSize}
		if g.inProcess != nil {
			o.Raw = g.inProcess.raw
		}
		if !tenantstorage.KeptElsewhere(g.elsewhere, resource) {
			o.Revisions = g.revisions
		}
		opts.Decorator = watchcache.Decorator(o)
	}
	if g.uncached || uncachedResources.Has(resource) {
		opts.Decorator = generic.UndecoratedStorage
		if g.inProcess != nil {
			opts.Decorator = g.inProcess.decorator
		}
		if g.raw != nil {
			opts.Decorator = g.raw
		}
	}
	if typedResources.Has(resource) {
		// Objects stored while the kind was a custom resource may hold
		// what its schema admitted and its Go type refuses.
		cfg := *opts.StorageConfig
		cfg.Codec = typedgroup.StoredTimes(cfg.Codec)
		opts.StorageConfig = &cfg
	}
	opts.Decorator = tenantstorage.Decorate(opts.Decorator, tenantstorage.Options{Prefixes: g.prefixes, MaxListItems: g.maxList, Shown: g.shown, Meter: g.meter, Joints: g.joints,
		Share: projectbootstrap.ShareRootCA(), TenancyMaps: g.maps})
	return opts, nil
}

// uncachedResources have no watch cache: ServiceActivations, one per
// enablement, and the quota objects kept per consumer or charged object
// (grants, claims, buckets), would be held decoded whole (several KiB each,
// managed fields included) in caches nobody needs: their one reader across
// the platform (the catalog's index, the quota ledger) keeps its own slim
// copy, and a project's or organization's few are one key range in etcd.
var uncachedResources = sets.New(tenancy.Activations,
	quotav1alpha1.GrantsResource.GroupResource(), quotav1alpha1.ClaimsResource.GroupResource(), quotav1alpha1.BucketsResource.GroupResource())

// typedResources are the resources served from typed storage.
var typedResources = sets.New(registry.Resources()...)

// makeStorageTenantKeyed wraps the storage of every server in the chain:
// built-in APIs, CRDs and their instances, and APIServices.
func makeStorageTenantKeyed(c *Config, prefixes *tenantstorage.Prefixes) {
	maps := tenantstorage.NewTenancyMaps()
	wrap := func(g generic.RESTOptionsGetter, uncached bool) generic.RESTOptionsGetter {
		if g == nil {
			return nil
		}
		return tenantRESTOptions{inner: g, prefixes: prefixes, maxList: c.Options.MaxListItems, uncached: uncached, shown: c.Catalog, meter: meterOf(c), joints: c.Joints,
			maps: maps, revisions: c.Keys, elsewhere: c.EtcdElsewhere, inProcess: c.inProcess}
	}
	c.ControlPlane.Generic.RESTOptionsGetter = wrap(c.ControlPlane.Generic.RESTOptionsGetter, false)
	// CustomResourceDefinitions themselves have no watch cache: it would
	// hold every project's CRDs decoded with their schemas, nothing shared
	// between projects (about 16 KiB a CRD), while every reader of all of
	// them (the CRD index, the lifecycle controller) keeps its own slimmer
	// cache and a project's CRDs are one key range in etcd.
	c.APIExtensions.GenericConfig.RESTOptionsGetter = wrap(c.APIExtensions.GenericConfig.RESTOptionsGetter, true)
	c.APIExtensions.ExtraConfig.CRDRESTOptionsGetter = wrap(c.APIExtensions.ExtraConfig.CRDRESTOptionsGetter, false)
	c.Aggregator.GenericConfig.RESTOptionsGetter = wrap(c.Aggregator.GenericConfig.RESTOptionsGetter, false)
}

// meterOf is the server's storage meter, or no meter (not a nil pointer in
// an interface) when the server has none.
func meterOf(c *Config) tenantstorage.Meter {
	if c.Usage == nil {
		return nil
	}
	return c.Usage
}

// authorizeProjects puts Milo IAM first in every authorizer of the chain, makes
// the rest decide project requests with the project's own RBAC (projectrbac),
// and lets every authorizer see the project or organization in the user's
// iam.miloapis.com/parent-* extras.
func authorizeProjects(c *Config) {
	rbacInformers := c.ControlPlane.VersionedInformers.Rbac().V1()
	listers := projectrbac.PlatformListers{
		ClusterRoles:        rbacInformers.ClusterRoles().Lister(),
		ClusterRoleBindings: rbacInformers.ClusterRoleBindings().Lister(),
	}
	iam := authz.New(c.IAM, c.Hierarchy.Parent)
	for _, gc := range []*genericapiserver.Config{c.ControlPlane.Generic, &c.Aggregator.GenericConfig.Config, &c.APIExtensions.GenericConfig.Config} {
		if gc.Authorization.Authorizer == nil {
			continue
		}
		projects := projectrbac.New(gc.Authorization.Authorizer, gc.RuleResolver, c.RBAC, listers, iam)
		// The issuer documents' authorizer last: it relies on projects
		// refusing whoever has no foothold in the project.
		gc.Authorization.Authorizer = tenancy.WithParentExtras(union.New(iam, projects, satokens.DiscoveryAuthorizer{}))
		// API Priority and Fairness classifies a project's members' requests by project.
		if c.Options.ProjectFlows {
			gc.FlowControl = fairness.Wrap(gc.FlowControl, iam)
		}
		// What kubectl auth can-i --list answers: IAM's grants and the project's RBAC.
		gc.RuleResolver = union.NewRuleResolvers(iam, projects)
	}
}

// authenticateTenants makes a service account token valid only in the tenant
// that issued it: each project is an issuer of its own, its tokens carry its
// name and storage id, and every server's authenticator refuses them
// elsewhere. Identities it accepts are recorded as Users.
func authenticateTenants(c *Config) error {
	if c.ControlPlane.Extra.ServiceAccountIssuer != nil {
		generator := satokens.Generator{Inner: c.ControlPlane.Extra.ServiceAccountIssuer, Issuer: c.ControlPlane.Extra.ServiceAccountIssuerURL}
		if file := c.Options.ControlPlane.ServiceAccountSigningKeyFile; file != "" {
			key, err := keyutil.PrivateKeyFromFile(file)
			if err != nil {
				return fmt.Errorf("reading the service account signing key: %w", err)
			}
			generator.Key = key
		}
		c.ControlPlane.Extra.ServiceAccountIssuer = generator
	}
	authn, err := c.Options.ControlPlane.Authentication.ToAuthenticationConfig()
	if err != nil {
		return err
	}
	verifier := satokens.Verifier{Issuers: authn.ServiceAccountIssuers, Keys: authn.ServiceAccountPublicKeysGetter, Audiences: authn.APIAudiences}
	for _, info := range []*genericapiserver.AuthenticationInfo{&c.ControlPlane.Generic.Authentication, &c.Aggregator.GenericConfig.Authentication, &c.APIExtensions.GenericConfig.Authentication} {
		if info.Authenticator != nil {
			info.Authenticator = telemetry.RecordTenant(c.Users.Authenticator(satokens.Authenticator(info.Authenticator, c.Tenant, verifier)))
		}
	}
	// Requests are authenticated by the aggregator's chain, the outermost
	// (the others' authenticators serve TokenReviews, deep in a request,
	// where growing the stack would copy all of it).
	if info := &c.Aggregator.GenericConfig.Authentication; info.Authenticator != nil {
		info.Authenticator = growstack.Authenticator(info.Authenticator)
	}
	return nil
}

// routeTenants puts the tenant router in front of the aggregator's handler chain,
// the outermost of the server, and its existence check behind authorization.
// Behind that check, each project's issuer serves its discovery documents.
func routeTenants(c *Config, tree *hierarchy.Tree) error {
	lifetimes, watches := tenancy.NewLifetimes(), tenancy.NewWatchLimit(c.Options.MaxWatches)
	budget, seats := fairness.NewBudget(c.Options.TenantCPUShare), fairness.NewSeats(c.Options.TenantConcurrency)
	turns := fairness.NewTurns(c.Options.TenantConcurrency, fairness.DefaultStuckAfter)
	if err := tree.EndRequestsOfDeleted(lifetimes); err != nil {
		return err
	}
	c.Aggregator.GenericConfig.BuildHandlerChainFunc = func(apiHandler http.Handler, gc *genericapiserver.Config) http.Handler {
		router := &tenancy.Router{Projects: tree, Hierarchy: tree, RequestInfo: gc.RequestInfoResolver, Serializer: gc.Serializer, Lifetimes: lifetimes, Watches: watches, ProjectCRDs: c.Options.ProjectCRDs,
			Services: c.Catalog, Contextualize: telemetry.WithTenantLogger, LongRunning: gc.LongRunningFunc}
		if c.ProjectCRDs != nil {
			router.ProjectAPIs = c.ProjectCRDs
		}
		if c.Top != nil {
			router.Requests = c.Top
		}
		if budget != nil {
			router.Budget = budget
		}
		if seats != nil {
			router.Seats = seats
		}
		if turns != nil {
			router.Turns = turns
		}
		sa := c.ControlPlane.Extra
		issuers := satokens.NewDiscovery(sa.ServiceAccountIssuerURL, sa.ServiceAccountJWKSURI, sa.ServiceAccountPublicKeysGetter, gc.Serializer)
		// Outermost: route by URL. Innermost, after authentication and
		// authorization: check the project or organization exists, then
		// that the tenant is served what it asks for, and give a create
		// its joint transaction.
		chain := genericapiserver.DefaultBuildHandlerChain(router.CheckExistence(router.CheckServices(issuers.Wrap(c.Joints.Wrap(apiHandler)))), gc)
		return growstack.Handler(router.Wrap(chain))
	}
	return nil
}
