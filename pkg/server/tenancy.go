package server

import (
	"context"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/iam/projectrbac"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenancy"
)

var projectsResource = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "projects"}

// tenantRESTOptions makes every resource's storage tenant-keyed.
type tenantRESTOptions struct {
	inner    generic.RESTOptionsGetter
	prefixes *tenantstorage.Prefixes
}

func (g tenantRESTOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.inner.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = tenantstorage.Decorate(opts.Decorator, g.prefixes)
	return opts, nil
}

// makeStorageTenantKeyed wraps the storage of every server in the chain:
// built-in APIs, CRDs and their instances, and APIServices.
func makeStorageTenantKeyed(c *Config, prefixes *tenantstorage.Prefixes) {
	wrap := func(g generic.RESTOptionsGetter) generic.RESTOptionsGetter {
		if g == nil {
			return nil
		}
		return tenantRESTOptions{inner: g, prefixes: prefixes}
	}
	c.ControlPlane.Generic.RESTOptionsGetter = wrap(c.ControlPlane.Generic.RESTOptionsGetter)
	c.APIExtensions.GenericConfig.RESTOptionsGetter = wrap(c.APIExtensions.GenericConfig.RESTOptionsGetter)
	c.APIExtensions.ExtraConfig.CRDRESTOptionsGetter = wrap(c.APIExtensions.ExtraConfig.CRDRESTOptionsGetter)
	c.Aggregator.GenericConfig.RESTOptionsGetter = wrap(c.Aggregator.GenericConfig.RESTOptionsGetter)
}

// authorizeProjects makes every authorizer of the chain decide project requests
// with the project's own RBAC (projectrbac), and see the project in the user's
// iam.miloapis.com/parent-* extras.
func authorizeProjects(c *Config) {
	rbacInformers := c.ControlPlane.VersionedInformers.Rbac().V1()
	listers := projectrbac.PlatformListers{
		ClusterRoles:        rbacInformers.ClusterRoles().Lister(),
		ClusterRoleBindings: rbacInformers.ClusterRoleBindings().Lister(),
	}
	for _, info := range []*genericapiserver.AuthorizationInfo{&c.ControlPlane.Generic.Authorization, &c.Aggregator.GenericConfig.Authorization, &c.APIExtensions.GenericConfig.Authorization} {
		if info.Authorizer != nil {
			info.Authorizer = tenancy.WithParentExtras(projectrbac.Authorizer(info.Authorizer, c.RBAC, listers))
		}
	}
}

// routeTenants puts the tenant router in front of the aggregator's handler chain,
// the outermost of the server, and its existence check behind authorization.
func routeTenants(c *Config, projects *projectIndex) {
	c.Aggregator.GenericConfig.BuildHandlerChainFunc = func(apiHandler http.Handler, gc *genericapiserver.Config) http.Handler {
		router := &tenancy.Router{Projects: projects, Hierarchy: projects, RequestInfo: gc.RequestInfoResolver, Serializer: gc.Serializer}
		// Outermost: route by URL. Innermost, after authentication and
		// authorization: check the project or organization exists.
		chain := genericapiserver.DefaultBuildHandlerChain(router.CheckExistence(apiHandler), gc)
		return router.Wrap(chain)
	}
}

// projectIndex answers whether a project exists from one shared, metadata-only
// informer over all Project objects. A miss is confirmed with a live read, so a
// project is reachable the moment its creation returns.
type projectIndex struct {
	informer cache.SharedIndexInformer
	client   metadata.ResourceInterface
	metadata metadata.Interface
}

func newProjectIndex(loopback *rest.Config) (*projectIndex, error) {
	client, err := metadata.NewForConfig(loopback)
	if err != nil {
		return nil, err
	}
	informer := metadatainformer.NewFilteredMetadataInformer(client, projectsResource, metav1.NamespaceAll, 10*time.Minute, cache.Indexers{}, nil)
	return &projectIndex{informer: informer.Informer(), client: client.Resource(projectsResource), metadata: client}, nil
}

func (p *projectIndex) run(ctx context.Context) {
	go p.informer.RunWithContext(ctx)
}

func (p *projectIndex) ProjectState(ctx context.Context, name string) (tenancy.ProjectState, error) {
	if p.informer.HasSynced() {
		if obj, ok, _ := p.informer.GetStore().GetByKey(name); ok {
			return stateOf(obj.(metav1.Object)), nil
		}
	}
	obj, err := p.client.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return stateOf(obj), nil
	case apierrors.IsNotFound(err):
		return tenancy.ProjectMissing, nil
	default:
		return tenancy.ProjectMissing, err
	}
}

func stateOf(p metav1.Object) tenancy.ProjectState {
	if p.GetDeletionTimestamp() != nil {
		return tenancy.ProjectDeleting
	}
	return tenancy.ProjectActive
}

// OrganizationExists reads the Organization live: organization contexts are
// entered far less often than projects, and a live read is always current.
func (p *projectIndex) OrganizationExists(ctx context.Context, name string) (bool, error) {
	_, err := p.metadata.Resource(projectsResource.GroupVersion().WithResource("organizations")).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, err
	}
}

// OrganizationOf returns the organization label of a Folder or Project.
func (p *projectIndex) OrganizationOf(ctx context.Context, gr schema.GroupResource, name string) (string, bool, error) {
	obj, err := p.metadata.Resource(projectsResource.GroupVersion().WithResource(gr.Resource)).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return obj.Labels[tenancy.OrganizationLabel], true, nil
	case apierrors.IsNotFound(err):
		return "", false, nil
	default:
		return "", false, err
	}
}
