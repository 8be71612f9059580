// Package mcprovider is a multicluster-runtime provider for Milo: every Ready
// project is a cluster, engaged when it becomes Ready and disengaged when it
// is deleted (or is no longer Ready).
//
// An engaged project is a view, not a cluster of its own: one cache over the
// all-projects view holds every project's objects of the kinds the
// controllers watch, and a project's cache reads that cache filtered by
// project (an index); one client reaches every project, by the project named
// in each request's context (pkg/client). Each shared informer has one event
// handler, which hands an event to the handlers engaged for the event's
// project only: an event costs the same with 10 engaged projects as with
// 100,000, and engaging a project costs the provider its name and storage
// id, not an informer, a watch, a client or a goroutine. (multicluster-
// runtime's controllers start goroutines for each cluster engaged with them:
// Provider.Source with Options.DoNotEngage avoids that.)
package mcprovider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	miloclient "go.miloapis.com/milo/pkg/client"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Options configure a Provider.
type Options struct {
	// Scheme holds the kinds the controllers use (and Milo's resourcemanager
	// kinds, which New adds). Default: client-go's scheme.
	Scheme *runtime.Scheme
	// Engage, if set, decides which Ready projects are engaged.
	Engage func(*resourcemanagerv1alpha1.Project) bool
	// DoNotEngage keeps Ready projects from being engaged with the
	// manager's controllers: they are clusters (the manager's GetCluster
	// finds them) whose events reach controllers through Provider.Source
	// only. multicluster-runtime starts goroutines for every engaged
	// cluster (one per controller and two per watch of it); a controller
	// that watches through Sources on a provider that does not engage
	// costs nothing per project but its cached objects.
	DoNotEngage bool
}

// Provider makes every Ready project of a Milo server a cluster.
type Provider struct {
	platform *rest.Config
	http     *http.Client
	scheme   *runtime.Scheme
	mapper   apimeta.RESTMapper
	// shared caches every project's objects (the all-projects view);
	// projects caches the platform's Projects.
	shared, projects crcache.Cache
	// client reaches every project (miloclient.Routed).
	client      client.Client
	engage      func(*resourcemanagerv1alpha1.Project) bool
	doNotEngage bool

	mu          sync.Mutex
	clusters    map[string]*projectCluster // by project name
	names       map[string]string          // project names by storage id, of clusters
	sources     map[*projectSource]bool
	cancels     map[string]context.CancelFunc
	indexed     map[string]bool // IndexField's object kind and field
	dispatchers map[toolscache.SharedIndexInformer]*dispatcher
}

var (
	_ multicluster.Provider         = (*Provider)(nil)
	_ multicluster.ProviderRunnable = (*Provider)(nil)
)

// New prepares a provider from the platform's configuration. Its identity
// needs list and watch of Projects on the platform, and of the controllers'
// kinds in the all-projects view.
func New(platform *rest.Config, o Options) (*Provider, error) {
	scheme := o.Scheme
	if scheme == nil {
		scheme = runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			return nil, err
		}
	}
	if !scheme.Recognizes(resourcemanagerv1alpha1.SchemeGroupVersion.WithKind("Project")) {
		if err := resourcemanagerv1alpha1.AddToScheme(scheme); err != nil {
			return nil, err
		}
	}
	routed := miloclient.Routed(platform)
	hc, err := rest.HTTPClientFor(routed)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(platform, hc)
	if err != nil {
		return nil, err
	}
	shared, err := crcache.New(miloclient.AllProjectsConfig(routed), crcache.Options{
		HTTPClient: hc, Scheme: scheme, Mapper: mapper,
		DefaultTransform: qualify, NewInformer: listThenWatch,
	})
	if err != nil {
		return nil, err
	}
	projects, err := crcache.New(routed, crcache.Options{HTTPClient: hc, Scheme: scheme, Mapper: mapper,
		ByObject: map[client.Object]crcache.ByObject{&resourcemanagerv1alpha1.Project{}: {}}})
	if err != nil {
		return nil, err
	}
	cl, err := client.New(routed, client.Options{HTTPClient: hc, Scheme: scheme, Mapper: mapper})
	if err != nil {
		return nil, err
	}
	return &Provider{
		platform: rest.CopyConfig(platform), http: hc, scheme: scheme, mapper: mapper,
		shared: shared, projects: projects, client: cl, engage: o.Engage, doNotEngage: o.DoNotEngage,
		clusters: map[string]*projectCluster{}, cancels: map[string]context.CancelFunc{},
		names: map[string]string{}, sources: map[*projectSource]bool{},
		indexed: map[string]bool{}, dispatchers: map[toolscache.SharedIndexInformer]*dispatcher{},
	}, nil
}

// listThenWatch makes the shared cache's informers list, then watch. A
// streamed list (client-go's watch-list) keys the objects it receives before
// the informer's transform has qualified them, so two projects' objects of
// the same namespace and name would be one: all but one project's would be
// missing from the cache.
//
// It also leaves out controller-runtime's index by namespace: with the
// project index (newDispatcher) it would keep a second set of keys for
// every namespace of every project, and the provider never lists the shared
// cache across projects by namespace (a project's namespaced list filters
// the project's objects).
func listThenWatch(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	kept := toolscache.Indexers{}
	for name, f := range indexers {
		if name != toolscache.NamespaceIndex {
			kept[name] = f
		}
	}
	return toolscache.NewSharedIndexInformer(noWatchList{lw}, obj, resync, kept)
}

// noWatchList is a ListerWatcher that does not stream lists. It keeps the
// context of controller-runtime's lists and watches, so that stopping an
// informer cancels them.
type noWatchList struct{ toolscache.ListerWatcher }

// ListWithContext lists with ctx.
func (l noWatchList) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	return toolscache.ToListerWatcherWithContext(l.ListerWatcher).ListWithContext(ctx, options)
}

// WatchWithContext watches with ctx.
func (l noWatchList) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	return toolscache.ToListerWatcherWithContext(l.ListerWatcher).WatchWithContext(ctx, options)
}

// IsWatchListSemanticsUnSupported tells client-go to list, then watch.
func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// Get returns the engaged project of that name.
func (p *Provider) Get(_ context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clusters[string(name)]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("project %q: %w", name, multicluster.ErrClusterNotFound)
}

// IndexField indexes the shared cache: the index spans every project, and a
// project's cache lists from it the project's objects only. Asking for the
// same kind and field again does nothing.
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	gvk, err := apiutil.GVKForObject(obj, p.scheme)
	if err != nil {
		return err
	}
	key := gvk.String() + "|" + field
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.indexed[key] {
		return nil
	}
	// The extractor sees objects as their project serves them, not as the
	// shared cache keeps them (a namespace with the project's id in front).
	unqualifiedExtract := func(o client.Object) []string {
		c, ok := unqualified(o).(client.Object)
		if !ok {
			return nil
		}
		return extract(c)
	}
	if err := p.shared.IndexField(ctx, obj, field, unqualifiedExtract); err != nil {
		return err
	}
	p.indexed[key] = true
	return nil
}

// Start runs the shared caches and engages every Ready project until ctx
// ends; the multicluster manager calls it.
func (p *Provider) Start(ctx context.Context, aware multicluster.Aware) error {
	errs := make(chan error, 2)
	go func() { errs <- p.shared.Start(ctx) }()
	go func() { errs <- p.projects.Start(ctx) }()
	if !p.projects.WaitForCacheSync(ctx) {
		return errors.New("the Projects cache did not sync")
	}
	inf, err := p.projects.GetInformer(ctx, &resourcemanagerv1alpha1.Project{})
	if err != nil {
		return err
	}
	sync := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if project, ok := obj.(*resourcemanagerv1alpha1.Project); ok {
			p.sync(ctx, aware, project)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    sync,
		UpdateFunc: func(_, obj any) { sync(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if project, ok := obj.(*resourcemanagerv1alpha1.Project); ok {
				p.disengage(project.Name, tenancy.StorageIDOf(project))
			}
		},
	}); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

// sync engages a Ready project (again, if its name now belongs to a later
// project) and disengages one that is no longer Ready or is being deleted.
func (p *Provider) sync(ctx context.Context, aware multicluster.Aware, project *resourcemanagerv1alpha1.Project) {
	id := tenancy.StorageIDOf(project)
	if !ready(project) || (p.engage != nil && !p.engage(project)) {
		p.disengage(project.Name, "")
		return
	}
	p.mu.Lock()
	if c, ok := p.clusters[project.Name]; ok && c.project.ID == id {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.disengage(project.Name, "") // an earlier project of the same name
	c := &projectCluster{p: p, project: miloclient.Project{Name: project.Name, ID: id}}
	// A project that is not engaged needs no context of its own: with
	// DoNotEngage the provider keeps, per project, its cluster and name only.
	var engaged context.Context
	p.mu.Lock()
	p.clusters[project.Name], p.names[id] = c, project.Name
	if !p.doNotEngage {
		var cancel context.CancelFunc
		engaged, cancel = context.WithCancel(ctx)
		p.cancels[project.Name] = cancel
	}
	sources := make([]*projectSource, 0, len(p.sources))
	for s := range p.sources {
		sources = append(sources, s)
	}
	p.mu.Unlock()
	for _, s := range sources {
		s.replay(id)
	}
	if p.doNotEngage {
		return
	}
	if err := aware.Engage(engaged, multicluster.ClusterName(project.Name), c); err != nil {
		klog.ErrorS(err, "Engaging a project", "project", project.Name)
		p.disengage(project.Name, id)
	}
}

// disengage ends the engagement of the project of that name (if id is set,
// only while that is its storage id).
func (p *Provider) disengage(name, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clusters[name]
	if !ok || (id != "" && c.project.ID != id) {
		return
	}
	if cancel, ok := p.cancels[name]; ok {
		cancel()
	}
	delete(p.clusters, name)
	delete(p.cancels, name)
	delete(p.names, c.project.ID)
}

// projectByID returns the name of the Ready project with storage id id.
func (p *Provider) projectByID(id string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name, ok := p.names[id]
	return name, ok
}

func (p *Provider) addSource(s *projectSource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sources[s] = true
}

func (p *Provider) removeSource(s *projectSource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sources, s)
}

// ready tells whether a project's control plane is initialized and the
// project is not being deleted.
func ready(project *resourcemanagerv1alpha1.Project) bool {
	if project.DeletionTimestamp != nil {
		return false
	}
	for _, c := range project.Status.Conditions {
		if c.Type == resourcemanagerv1alpha1.ConditionReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// sharedInformer returns the shared cache's informer of obj's kind.
func (p *Provider) sharedInformer(ctx context.Context, obj client.Object) (toolscache.SharedIndexInformer, schema.GroupVersionKind, error) {
	gvk, err := apiutil.GVKForObject(obj, p.scheme)
	if err != nil {
		return nil, gvk, err
	}
	inf, err := p.shared.GetInformer(ctx, obj)
	if err != nil {
		return nil, gvk, err
	}
	sii, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, gvk, fmt.Errorf("the shared cache's informer of %s is a %T", gvk, inf)
	}
	return sii, gvk, nil
}

// dispatcherOf returns the one dispatcher of a shared informer.
func (p *Provider) dispatcherOf(inf toolscache.SharedIndexInformer) (*dispatcher, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.dispatchers[inf]; ok {
		return d, nil
	}
	d, err := newDispatcher(inf)
	if err != nil {
		return nil, err
	}
	p.dispatchers[inf] = d
	return d, nil
}

// namespaced tells whether gvk's objects live in namespaces.
func (p *Provider) namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := p.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, err
	}
	return m.Scope.Name() == apimeta.RESTScopeNameNamespace, nil
}
