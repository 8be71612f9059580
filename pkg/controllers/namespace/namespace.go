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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/namespace/deletion"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/events"
	"go.miloapis.com/milo/pkg/controllers/manager"
)

// Name is the controller's name in the registry of controllers.
const Name = "namespace"

// Controller deletes the contents of deleted namespaces.
type Controller struct {
	clients  *allprojects.Clients
	events   *events.Recorder
	platform allprojects.ResourceLists
	projects allprojects.ResourceLists
}

// New prepares the controller; recorder records why a deletion waits.
func New(clients *allprojects.Clients, recorder *events.Recorder) *Controller {
	return &Controller{clients: clients, events: recorder,
		platform: allprojects.ResourceLists{Namespaced: true}, projects: allprojects.ResourceLists{Namespaced: true}}
}

// Run watches the platform's and every project's namespaces and works the
// queue with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	queue := manager.NewTenantQueue[allprojects.Key](Name)
	defer queue.ShutDown()
	// Projects' own kinds: a namespace of a project holds instances of the
	// project's CRDs too, which the platform's discovery does not list.
	crds, err := c.clients.ProjectCRDs(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Preparing informer", "controller", Name)
		return
	}
	gvr := corev1.SchemeGroupVersion.WithResource("namespaces")
	var informers []cache.SharedIndexInformer
	for _, allProjects := range []bool{false, true} {
		inf, err := c.clients.MetadataInformer(ctx, gvr, allProjects, nil)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Preparing informer", "controller", Name)
			return
		}
		informers = append(informers, inf)
	}
	enqueue := func(obj any) {
		if m, ok := obj.(metav1.Object); ok && m.GetDeletionTimestamp() != nil {
			if k, ok := allprojects.KeyOf(obj, true); ok {
				queue.Add(k)
			}
		}
	}
	if !manager.StartInformers(ctx, Name, cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }}, informers...) ||
		!manager.StartInformers(ctx, Name, nil, crds) {
		return
	}
	manager.Work(ctx, Name, queue, workers, func(ctx context.Context, key allprojects.Key) error { return c.sync(ctx, key, crds) })
}

// sync deletes one namespace's contents and finalizes it, with clients of its
// own project made for this work item.
func (c *Controller) sync(ctx context.Context, key allprojects.Key, crds cache.SharedIndexInformer) error {
	ctx = allprojects.Within(ctx, key)
	cfg := c.clients.Config(key.Project)
	core, err := corev1client.NewForConfigAndClient(cfg, c.clients.HTTPClient())
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfigAndClient(cfg, c.clients.HTTPClient())
	if err != nil {
		return err
	}
	lists := &c.projects
	if key.Project == "" {
		lists = &c.platform
	}
	discover := func() ([]*metav1.APIResourceList, error) {
		shared, err := lists.Get(func() (discovery.DiscoveryInterface, error) {
			return discovery.NewDiscoveryClientForConfigAndClient(cfg, c.clients.HTTPClient())
		})
		if key.Project == "" {
			return shared, err
		}
		// What every project is served (the kept answer may be any
		// project's, with its own kinds: those go) and this project's own kinds.
		out := make([]*metav1.APIResourceList, 0, len(shared))
		for _, l := range shared {
			if gv, perr := schema.ParseGroupVersion(l.GroupVersion); perr == nil && !allprojects.DefinedByProjects(crds, gv.Group) {
				out = append(out, l)
			}
		}
		return append(out, allprojects.OwnResources(crds, key.ID, true)...), err
	}
	// Upstream's deleter exits the process when discovery finds nothing at all.
	if l, err := discover(); len(l) == 0 {
		return errors.Join(errors.New("discovering the namespaced resources found none"), err)
	}
	err = deletion.NewNamespacedResourcesDeleter(ctx, core.Namespaces(), meta, core, discover, corev1.FinalizerKubernetes).Delete(ctx, key.Name)
	var remaining *deletion.ResourcesRemainingError
	if errors.As(err, &remaining) {
		// The namespace's conditions say what remains (upstream's); the Event
		// tells whoever runs kubectl events that the deletion waits.
		c.event(ctx, core, key, corev1.EventTypeWarning, "SomeResourcesRemain", "deleting namespace %s waits: %v", key.Name, err)
		// Upstream's pace: look again when half the estimated time has passed.
		return manager.RetryAfter{After: time.Duration(remaining.Estimate/2+1) * time.Second, Reason: err.Error()}
	}
	if err != nil && ctx.Err() == nil {
		c.event(ctx, core, key, corev1.EventTypeWarning, "ContentDeletionFailed", "deleting namespace %s: %v", key.Name, err)
	}
	return err
}

// event records an Event about the namespace of key, in its project's (or the
// platform's) default namespace: the namespace itself takes no new objects.
func (c *Controller) event(ctx context.Context, core corev1client.CoreV1Interface, key allprojects.Key, eventtype, reason, format string, args ...any) {
	if c.events == nil {
		return
	}
	// The UID keeps Events about namespaces of one name in several projects
	// apart in the recorder's cache.
	ns, err := core.Namespaces().Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: key.Name, UID: ns.UID}
	c.events.ProjectEventf(key.Project, key.ID, ref, eventtype, reason, format, args...)
}
