// Package namespace deletes deleted namespaces in every project and on the
// platform, as kube-controller-manager's namespace controller does for a
// cluster: everything in the namespace is deleted (every namespaced kind the
// project serves, custom resources included), object finalizers and the
// namespace's spec.finalizers are waited for with the upstream conditions
// (NamespaceDeletionDiscoveryFailure, NamespaceDeletionContentFailure,
// NamespaceContentRemaining, NamespaceFinalizersRemaining), then the
// namespace is finalized and goes.
//
// The deletion itself is upstream's (k8s.io/kubernetes/pkg/controller/namespace/deletion),
// driven per work item with clients of the namespace's own project, built
// from one shared transport. Two informers (the platform's namespaces and the
// all-projects view's) feed one queue keyed by project and name; a fixed pool
// of workers serves every project. Only namespaces being deleted are queued.
package namespace

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/namespace/deletion"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
)

// Name is the controller's name in the registry of controllers.
const Name = "namespace"

// Controller deletes the contents of deleted namespaces.
type Controller struct {
	clients   *allprojects.Clients
	resources struct{ platform, projects resourceLists }
}

// New prepares the controller.
func New(clients *allprojects.Clients) *Controller {
	return &Controller{clients: clients}
}

// run is one term of the controller: its informers and queue live as long as
// it leads.
type run struct {
	*Controller
	queue workqueue.TypedRateLimitingInterface[allprojects.Key]
}

func (c *run) enqueue(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok || m.GetDeletionTimestamp() == nil {
		return
	}
	if k, ok := allprojects.KeyOf(obj, true); ok {
		c.queue.Add(k)
	}
}

// Run watches the platform's and every project's namespaces and works the
// queue with workers until ctx ends.
func (ctl *Controller) Run(ctx context.Context, workers int) {
	c := &run{Controller: ctl, queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[allprojects.Key](),
		workqueue.TypedRateLimitingQueueConfig[allprojects.Key]{Name: Name})}
	defer c.queue.ShutDown()
	gvr := corev1.SchemeGroupVersion.WithResource("namespaces")
	var informers []cache.SharedIndexInformer
	for _, allProjects := range []bool{false, true} {
		inf, err := ctl.clients.MetadataInformer(gvr, allProjects, 0, nil)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Preparing informer", "controller", Name)
			return
		}
		informers = append(informers, inf)
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: c.enqueue, UpdateFunc: func(_, o any) { c.enqueue(o) }}
	for _, inf := range informers {
		if _, err := inf.AddEventHandler(handler); err != nil {
			klog.FromContext(ctx).Error(err, "Registering event handler", "controller", Name)
			return
		}
		go inf.Run(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), informers[0].HasSynced, informers[1].HasSynced) {
		return
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for c.next(ctx) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

func (c *run) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.sync(ctx, key)
	var remaining *deletion.ResourcesRemainingError
	switch {
	case errors.As(err, &remaining):
		// Upstream's pace: look again when half the estimated time has passed.
		c.queue.AddAfter(key, time.Duration(remaining.Estimate/2+1)*time.Second)
	case err != nil && ctx.Err() == nil:
		klog.FromContext(ctx).Error(err, "Deleting namespace", "namespace", key)
		c.queue.AddRateLimited(key)
	default:
		c.queue.Forget(key)
	}
	return true
}

// sync deletes one namespace's contents and finalizes it, with clients of its
// own project made for this work item.
func (c *Controller) sync(ctx context.Context, key allprojects.Key) error {
	cfg := c.clients.Config(key.Project)
	core, err := corev1client.NewForConfigAndClient(cfg, c.clients.HTTPClient())
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfigAndClient(cfg, c.clients.HTTPClient())
	if err != nil {
		return err
	}
	lists := &c.resources.projects
	if key.Project == "" {
		lists = &c.resources.platform
	}
	discover := func() ([]*metav1.APIResourceList, error) {
		return lists.get(func() (discovery.DiscoveryInterface, error) {
			return discovery.NewDiscoveryClientForConfigAndClient(cfg, c.clients.HTTPClient())
		})
	}
	// Upstream's deleter exits the process when discovery finds nothing at all.
	if l, err := discover(); len(l) == 0 {
		return errors.Join(errors.New("discovering the namespaced resources found none"), err)
	}
	return deletion.NewNamespacedResourcesDeleter(ctx, core.Namespaces(), meta, core, discover, corev1.FinalizerKubernetes).Delete(ctx, key.Name)
}

// resourceLists keeps one discovery answer for a few seconds: every project
// serves the same resources, so one answer serves every namespace deletion.
type resourceLists struct {
	mu    sync.Mutex
	lists []*metav1.APIResourceList
	at    time.Time
}

func (r *resourceLists) get(client func() (discovery.DiscoveryInterface, error)) ([]*metav1.APIResourceList, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lists != nil && time.Since(r.at) < 10*time.Second {
		return r.lists, nil
	}
	disco, err := client()
	if err != nil {
		return nil, err
	}
	lists, err := discovery.ServerPreferredNamespacedResources(disco)
	if err != nil && len(lists) == 0 {
		return nil, err
	}
	// A partial answer (a group failing discovery) is used, not kept; the
	// deleter reports it as NamespaceDeletionDiscoveryFailure.
	if err == nil {
		r.lists, r.at = lists, time.Now()
	}
	return lists, err
}
