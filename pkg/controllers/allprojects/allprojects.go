// Package allprojects gives Milo's controllers one shared informer per
// resource for every project at once, over the all-projects view, and clients
// of one project at a time over one shared HTTP transport.
//
// The objects of two projects may share a namespace and name: an informer's
// store keys objects by namespace and name, so the informers here qualify each
// object's namespace with its project's storage id (see Qualify) before it is
// stored. Work queues are keyed by Key: project, namespace, name.
package allprojects

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Clients builds clients of the platform, of one project and of the
// all-projects view from one configuration and one HTTP transport: a
// project's client is a value made per work item, never kept per project.
type Clients struct {
	base *rest.Config
	http *http.Client
}

// NewClients prepares clients from the configuration of the platform. No
// client-side rate limit applies: the controllers' fixed worker pools bound
// what they ask of the server.
func NewClients(platform *rest.Config) (*Clients, error) {
	base := rest.CopyConfig(platform)
	base.QPS, base.Burst = -1, -1
	base.Wrap(func(rt http.RoundTripper) http.RoundTripper { return expectProject{rt} })
	hc, err := rest.HTTPClientFor(base)
	if err != nil {
		return nil, err
	}
	return &Clients{base: base, http: hc}, nil
}

// HTTPClient is the shared transport, for building any client of Config's.
func (c *Clients) HTTPClient() *http.Client { return c.http }

// Config is the configuration of the control plane of project ("" for the
// platform). Its host carries the project's URL prefix.
func (c *Clients) Config(project string) *rest.Config {
	cfg := rest.CopyConfig(c.base)
	if project != "" {
		cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.ProjectPath(project)
	}
	return cfg
}

// AllProjectsConfig is the configuration of the all-projects view (list and watch only).
func (c *Clients) AllProjectsConfig() *rest.Config {
	cfg := rest.CopyConfig(c.base)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.AllProjectsPath
	return cfg
}

// Within returns a context whose requests through these clients are refused
// (404) unless they reach the project of key by its storage id, not merely by
// its name: work queued for a deleted project never reaches a later one of
// the same name.
func Within(ctx context.Context, key Key) context.Context {
	if key.Project == "" || key.ID == "" {
		return ctx
	}
	return context.WithValue(ctx, projectIDKey{}, key.ID)
}

type projectIDKey struct{}

// expectProject sends the storage id Within put in a request's context.
type expectProject struct{ rt http.RoundTripper }

func (e expectProject) RoundTrip(req *http.Request) (*http.Response, error) {
	if id, ok := req.Context().Value(projectIDKey{}).(string); ok {
		req = req.Clone(req.Context())
		req.Header.Set(tenancy.ExpectedProjectIDHeader, id)
	}
	return e.rt.RoundTrip(req)
}

// Key names one object of one project (Project "" for the platform).
type Key struct {
	// Project is the project's name; ID its storage id, which tells a project
	// from a later one of the same name.
	Project, ID     string
	Namespace, Name string
}

// String renders the key for logs.
func (k Key) String() string {
	p := k.Project
	if p == "" {
		p = "platform"
	}
	if k.Namespace == "" {
		return p + ":" + k.Name
	}
	return p + ":" + k.Namespace + "/" + k.Name
}

// separator joins a project's storage id and a namespace in a qualified
// namespace. Neither a storage id nor a namespace contains it.
const separator = "/"

// Qualify is the informers' transform: it makes an object's namespace
// "<storage id>/<namespace>" ("<storage id>" for a cluster-scoped object), so
// that the store keys of two projects' objects never collide. It keeps the
// object's annotations, from which KeyOf reads the project. Informers and
// reflectors apply it once to each object they receive; it must not be
// applied twice (a namespace may equal a storage id: a project stored
// before storage ids, named like one of its namespaces).
func Qualify(obj any) (any, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	id := m.GetAnnotations()[tenancy.IDAnnotationKey]
	if id == "" {
		id = m.GetAnnotations()[tenancy.AnnotationKey]
	}
	if id != "" {
		if m.GetNamespace() == "" {
			m.SetNamespace(id)
		} else {
			m.SetNamespace(id + separator + m.GetNamespace())
		}
	}
	m.SetManagedFields(nil)
	return obj, nil
}

// KeyOf returns the key of an object from a Qualify'd informer (or a platform
// informer, whose objects are not qualified), also from a deletion tombstone.
func KeyOf(obj any, clusterScoped bool) (Key, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return Key{}, false
	}
	k := Key{Project: m.GetAnnotations()[tenancy.AnnotationKey], Name: m.GetName()}
	ns := m.GetNamespace()
	if k.Project == "" {
		k.Namespace = ns
		return k, true
	}
	k.ID, k.Namespace, _ = strings.Cut(ns, separator)
	if clusterScoped {
		k.Namespace = ""
	}
	return k, true
}

// StoreKey is where a Qualify'd informer keeps the object of k.
func (k Key) StoreKey() string {
	if k.Project == "" {
		if k.Namespace == "" {
			return k.Name
		}
		return k.Namespace + "/" + k.Name
	}
	if k.Namespace == "" {
		return k.ID + "/" + k.Name
	}
	return k.ID + separator + k.Namespace + "/" + k.Name
}

// MetadataInformer returns an informer of gvr's object metadata: over the
// all-projects view when allProjects, else over the platform; selector, if
// not nil, narrows it by field (metadata.name=...). One serves every project;
// its objects are qualified (see Qualify).
func (c *Clients) MetadataInformer(gvr schema.GroupVersionResource, allProjects bool, resync time.Duration, selector fields.Selector) (cache.SharedIndexInformer, error) {
	cfg := c.Config("")
	if allProjects {
		cfg = c.AllProjectsConfig()
	}
	client, err := metadata.NewForConfigAndClient(cfg, c.http)
	if err != nil {
		return nil, err
	}
	var tweak metadatainformer.TweakListOptionsFunc
	if selector != nil {
		tweak = func(o *metav1.ListOptions) { o.FieldSelector = selector.String() }
	}
	inf := metadatainformer.NewFilteredMetadataInformer(client, gvr, metav1.NamespaceAll, resync, cache.Indexers{}, tweak).Informer()
	return inf, setTransform(inf, allProjects)
}

// CoreInformer returns an informer of whole objects of a core-group resource
// (obj is an empty one of its type), like MetadataInformer. Keep it narrow
// with selector: it caches every object it lists.
func (c *Clients) CoreInformer(resource string, obj runtime.Object, allProjects bool, selector fields.Selector) (cache.SharedIndexInformer, error) {
	return c.Informer(func(cfg *rest.Config, hc *http.Client) (rest.Interface, error) {
		core, err := corev1client.NewForConfigAndClient(cfg, hc)
		if err != nil {
			return nil, err
		}
		return core.RESTClient(), nil
	}, resource, obj, allProjects, selector)
}

// Informer returns an informer of whole objects of resource through the REST
// client of its group that newREST makes, like CoreInformer.
func (c *Clients) Informer(newREST func(*rest.Config, *http.Client) (rest.Interface, error), resource string, obj runtime.Object, allProjects bool, selector fields.Selector) (cache.SharedIndexInformer, error) {
	cfg := c.Config("")
	if allProjects {
		cfg = c.AllProjectsConfig()
	}
	client, err := newREST(cfg, c.http)
	if err != nil {
		return nil, err
	}
	if selector == nil {
		selector = fields.Everything()
	}
	lw := cache.NewListWatchFromClient(client, resource, metav1.NamespaceAll, selector)
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{ByProject: byProject})
	return inf, setTransform(inf, allProjects)
}

// ByProject indexes a Qualify'd informer's objects by their project's storage id.
const ByProject = "project"

func byProject(obj any) ([]string, error) {
	k, ok := KeyOf(obj, false)
	if !ok || k.Project == "" {
		return nil, nil
	}
	return []string{k.ID}, nil
}

func setTransform(inf cache.SharedIndexInformer, allProjects bool) error {
	if allProjects {
		return inf.SetTransform(Qualify)
	}
	return inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return obj, nil
	})
}

// ResourceLists keeps one discovery answer for a few seconds: every project
// serves the same kinds, so one answer serves every project's work item.
type ResourceLists struct {
	// Namespaced keeps only namespaced resources.
	Namespaced bool

	mu    sync.Mutex
	lists []*metav1.APIResourceList
	at    time.Time
}

// Invalidate drops the kept answer: the next Get asks the server.
func (r *ResourceLists) Invalidate() {
	r.mu.Lock()
	r.lists = nil
	r.mu.Unlock()
}

// Get returns the preferred resources of the server client reaches, from
// the kept answer when it is fresh. A partial answer (a group failing
// discovery) is returned with its error and not kept.
func (r *ResourceLists) Get(client func() (discovery.DiscoveryInterface, error)) ([]*metav1.APIResourceList, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lists != nil && time.Since(r.at) < 10*time.Second {
		return r.lists, nil
	}
	disco, err := client()
	if err != nil {
		return nil, err
	}
	var lists []*metav1.APIResourceList
	if r.Namespaced {
		lists, err = discovery.ServerPreferredNamespacedResources(disco)
	} else {
		lists, err = disco.ServerPreferredResources()
	}
	if err == nil {
		r.lists, r.at = lists, time.Now()
	}
	return lists, err
}
