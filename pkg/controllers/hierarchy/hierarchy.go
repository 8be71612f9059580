// Package hierarchy runs the controllers that make Organizations, Folders and
// Projects ready:
//
//   - an Organization gets its namespace organization-{name}, then Ready;
//   - a Folder is Ready once admission has placed it (its chain is valid);
//   - a Project's control plane is bootstrapped — its `default` namespace is
//     created inside the project — then the Project is Ready.
//
// Each kind has one shared informer and one work queue; a project is reached
// through a client scoped to it over one shared HTTP transport. Nothing is
// allocated per project beyond a queue entry while it is being worked on.
package hierarchy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/tenancy"
)

var (
	organizations = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "organizations"}
	folders       = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "folders"}
	projects      = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "projects"}
)

// Controllers makes hierarchy objects ready.
type Controllers struct {
	purge Purger
	// discovered caches what projects serve, for deletions.
	discoveryMu  sync.Mutex
	discovered   []*metav1.APIResourceList
	discoveredAt time.Time

	config   *rest.Config
	http     *http.Client
	dynamic  dynamic.Interface
	platform kubernetes.Interface
	factory  dynamicinformer.DynamicSharedInformerFactory
	workers  int
}

// New prepares the controllers over a client configuration of the platform and
// the server's shared hierarchy informers (factory); purge removes a deleted
// project's keys from storage.
func New(config *rest.Config, factory dynamicinformer.DynamicSharedInformerFactory, workers int, purge Purger) (*Controllers, error) {
	config = rest.CopyConfig(config)
	// A shared transport serves the platform and every project.
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	platform, err := kubernetes.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	if workers < 1 {
		workers = 1
	}
	return &Controllers{purge: purge, config: config, http: httpClient, dynamic: dyn, platform: platform,
		factory: factory, workers: workers}, nil
}

// project returns a client of one project's control plane over the shared transport.
func (c *Controllers) project(name string) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(c.config)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.ProjectPath(name)
	return kubernetes.NewForConfigAndClient(cfg, c.http)
}

// Run starts one loop per kind and works until ctx ends.
func (c *Controllers) Run(ctx context.Context) {
	loops := []*loop{
		c.newLoop(organizations, c.syncOrganization),
		c.newLoop(folders, c.syncFolder),
		c.newLoop(projects, c.syncProject),
	}
	c.factory.Start(ctx.Done())
	for _, l := range loops {
		go l.run(ctx, c.workers)
	}
	<-ctx.Done()
}

type loop struct {
	gvr      schema.GroupVersionResource
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	sync     func(ctx context.Context, obj *unstructured.Unstructured) error
}

func (c *Controllers) newLoop(gvr schema.GroupVersionResource, sync func(context.Context, *unstructured.Unstructured) error) *loop {
	l := &loop{gvr: gvr, informer: c.factory.ForResource(gvr).Informer(), sync: sync,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: gvr.Resource})}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			l.queue.Add(key)
		}
	}
	l.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }}) //nolint:errcheck
	return l
}

func (l *loop) run(ctx context.Context, workers int) {
	defer l.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
		return
	}
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for l.next(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func (l *loop) next(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	obj, exists, err := l.informer.GetStore().GetByKey(key)
	if err == nil && exists {
		err = l.sync(ctx, obj.(*unstructured.Unstructured))
	}
	var waiting errWaiting
	if errors.As(err, &waiting) {
		l.queue.AddAfter(key, 2*time.Second)
		return true
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Syncing", "resource", l.gvr.Resource, "name", key)
		l.queue.AddRateLimited(key)
		return true
	}
	l.queue.Forget(key)
	return true
}

func (c *Controllers) syncOrganization(ctx context.Context, org *unstructured.Unstructured) error {
	if org.GetDeletionTimestamp() != nil {
		return nil
	}
	ns := tenancy.OrganizationNamespace(org.GetName())
	_, err := c.platform.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   ns,
		Labels: map[string]string{tenancy.OrganizationLabel: org.GetName()},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: organizations.GroupVersion().String(), Kind: "Organization",
			Name: org.GetName(), UID: org.GetUID()}},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	return c.setReady(ctx, organizations, org, "NamespaceReady", "namespace "+ns+" exists")
}

func (c *Controllers) syncFolder(ctx context.Context, f *unstructured.Unstructured) error {
	if f.GetDeletionTimestamp() != nil {
		return nil
	}
	return c.setReady(ctx, folders, f, "Placed", "in organization "+f.GetLabels()[tenancy.OrganizationLabel])
}

func (c *Controllers) syncProject(ctx context.Context, p *unstructured.Unstructured) error {
	if p.GetDeletionTimestamp() != nil {
		return c.deleteProject(ctx, p)
	}
	if !slices.Contains(p.GetFinalizers(), ProjectFinalizer) {
		// Nothing is bootstrapped before the finalizer is in place, so that
		// nothing can outlive the Project.
		updated := p.DeepCopy()
		updated.SetFinalizers(append(updated.GetFinalizers(), ProjectFinalizer))
		_, err := c.dynamic.Resource(projects).Update(ctx, updated, metav1.UpdateOptions{FieldManager: "milo-hierarchy"})
		if apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	if isReady(p) {
		return nil
	}
	client, err := c.project(p.GetName())
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceDefault}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bootstrapping project %s: %w", p.GetName(), err)
	}
	return c.setReady(ctx, projects, p, "ControlPlaneReady", "the project's control plane is initialized")
}

func isReady(obj *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == string(metav1.ConditionTrue) {
			if gen, ok := m["observedGeneration"].(int64); !ok || gen == obj.GetGeneration() {
				return true
			}
		}
	}
	return false
}

// setReady sets the Ready condition.
func (c *Controllers) setReady(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, reason, message string) error {
	if isReady(obj) {
		return nil
	}
	return c.setCondition(ctx, gvr, obj, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: reason, Message: message})
}
