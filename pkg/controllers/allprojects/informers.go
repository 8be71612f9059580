package allprojects

import (
	"context"
	"net/http"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// An informer over the all-projects view keeps one object per namespace (or
// per object of whatever it watches) of every project: at 100,000 projects
// each byte it keeps per object is hundreds of kilobytes. So the informers
// here keep what the controllers decide on and nothing else: metadata
// informers keep an object's identity and deletion state (Slim), an index by
// project exists only where a controller asks for one, and informers of the
// same metadata in one term of the controllers are one informer.

// Slim reduces meta to what identifies an object in an informer's store and
// tells its handlers a change from a resync (name, qualified namespace,
// resourceVersion), whether it is being deleted (deletionTimestamp) and when
// it was made (creationTimestamp, a field of the struct that costs nothing
// more kept). An informer's transform applies it after Qualify, which has put
// the project into the namespace.
func Slim(meta *metav1.ObjectMeta) {
	*meta = metav1.ObjectMeta{Name: meta.Name, Namespace: meta.Namespace, ResourceVersion: meta.ResourceVersion,
		CreationTimestamp: meta.CreationTimestamp, DeletionTimestamp: meta.DeletionTimestamp}
}

// MetadataInformer returns an informer of gvr's objects that keeps of each
// its identity and deletion state only (see Slim): over the all-projects view
// when allProjects, else over the platform; selector, if not nil, narrows it
// by field (metadata.name=...). One serves every project; its objects are
// qualified (see Qualify).
//
// Within one ctx (one term of the controllers) the informers of the same
// resource, view and selector are one: controllers that ask for it share its
// cache and its watch. Start it with manager.StartInformers (it runs once,
// until ctx ends, however many controllers start it).
func (c *Clients) MetadataInformer(ctx context.Context, gvr schema.GroupVersionResource, allProjects bool, selector fields.Selector) (cache.SharedIndexInformer, error) {
	if selector == nil {
		selector = fields.Everything()
	}
	key := sharedKey{done: ctx.Done(), gvr: gvr, allProjects: allProjects, selector: selector.String(), kind: "metadata"}
	c.sharedMu.Lock()
	defer c.sharedMu.Unlock()
	if inf, ok := c.shared[key]; ok {
		return inf, nil
	}
	client, err := metadata.NewForConfigAndClient(c.viewConfig(allProjects), c.http)
	if err != nil {
		return nil, err
	}
	tweak := func(o *metav1.ListOptions) { o.FieldSelector = key.selector }
	inf := metadatainformer.NewFilteredMetadataInformer(client, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, tweak).Informer()
	if err := inf.SetTransform(func(obj any) (any, error) {
		obj = transform(obj, allProjects)
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			m.TypeMeta = metav1.TypeMeta{}
			Slim(&m.ObjectMeta)
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	return c.share(ctx, key, inf), nil
}

// share records inf as the informer of key for the term of ctx; the caller
// holds sharedMu.
func (c *Clients) share(ctx context.Context, key sharedKey, inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	if c.shared == nil {
		c.shared = map[sharedKey]cache.SharedIndexInformer{}
	}
	shared := &runOnce{SharedIndexInformer: inf}
	c.shared[key] = shared
	if done := ctx.Done(); done != nil {
		context.AfterFunc(ctx, func() {
			c.sharedMu.Lock()
			delete(c.shared, key)
			c.sharedMu.Unlock()
		})
	}
	return shared
}

// sharedKey names a shared informer: its term (ctx.Done()), what it watches
// and what it keeps of each object (kind).
type sharedKey struct {
	done        <-chan struct{}
	gvr         schema.GroupVersionResource
	allProjects bool
	selector    string
	kind        string
}

// runOnce is a shared informer that the second and later Runs leave alone
// (the informer itself would log them as misuse).
type runOnce struct {
	cache.SharedIndexInformer
	started atomic.Bool
}

func (r *runOnce) Run(stop <-chan struct{}) {
	if r.started.CompareAndSwap(false, true) {
		r.SharedIndexInformer.Run(stop)
	}
}

func (r *runOnce) RunWithContext(ctx context.Context) {
	if r.started.CompareAndSwap(false, true) {
		r.SharedIndexInformer.RunWithContext(ctx)
	}
}

// CoreInformer returns an informer of whole objects of a core-group resource
// (obj is an empty one of its type), like Informer.
func (c *Clients) CoreInformer(resource string, obj runtime.Object, allProjects bool, selector fields.Selector, keep cache.TransformFunc) (cache.SharedIndexInformer, error) {
	return c.Informer(func(cfg *rest.Config, hc *http.Client) (rest.Interface, error) {
		core, err := corev1client.NewForConfigAndClient(cfg, hc)
		if err != nil {
			return nil, err
		}
		return core.RESTClient(), nil
	}, resource, obj, allProjects, selector, keep)
}

// Informer returns an informer of whole objects of resource through the REST
// client of its group that newREST makes: over the all-projects view when
// allProjects (its objects qualified, see Qualify), else over the platform;
// selector, if not nil, narrows it by field. Keep it narrow: it caches every
// object it lists. keep, if not nil, runs on each object after Qualify, to
// drop what the controller does not decide on.
func (c *Clients) Informer(newREST func(*rest.Config, *http.Client) (rest.Interface, error), resource string, obj runtime.Object, allProjects bool, selector fields.Selector, keep cache.TransformFunc) (cache.SharedIndexInformer, error) {
	client, err := newREST(c.viewConfig(allProjects), c.http)
	if err != nil {
		return nil, err
	}
	if selector == nil {
		selector = fields.Everything()
	}
	lw := cache.NewListWatchFromClient(client, resource, metav1.NamespaceAll, selector)
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	return inf, inf.SetTransform(func(obj any) (any, error) {
		obj = transform(obj, allProjects)
		if keep != nil {
			return keep(obj)
		}
		return obj, nil
	})
}

func (c *Clients) viewConfig(allProjects bool) *rest.Config {
	if allProjects {
		return c.AllProjectsConfig()
	}
	return c.Config("")
}

// transform is every informer's own transform: Qualify for the all-projects
// view, dropping managed fields on the platform.
func transform(obj any, allProjects bool) any {
	if allProjects {
		obj, _ = Qualify(obj)
		return obj
	}
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj
}

// ByProject is the name of the index IndexByProject adds.
const ByProject = "project"

// IndexByProject indexes a Qualify'd informer's objects by their project's
// storage id, for a controller that reads all of one project's objects.
func IndexByProject(inf cache.SharedIndexInformer) error {
	return inf.AddIndexers(cache.Indexers{ByProject: func(obj any) ([]string, error) {
		k, ok := KeyOf(obj, false)
		if !ok || k.Project == "" {
			return nil, nil
		}
		return []string{k.ID}, nil
	}})
}
