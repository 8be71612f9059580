// Package resourcequota keeps the status of every ResourceQuota — in every
// project and on the platform — as Kubernetes' resource quota controller
// does: status.hard mirrors spec.hard, and status.used counts the objects the
// quota limits (count/<resource>[.<group>] and the legacy core names; other
// names concern pods, which Milo does not serve, and are 0).
//
// Enforcement does not wait for it: quota admission counts stored objects and
// reserves units on the quota itself (pkg/tenantadmission). This controller
// recomputes a quota when it is created or its spec changes, and every
// resync period, so that status.used also falls when objects are deleted.
//
// One informer of ResourceQuotas over the all-projects view and one over the
// platform; one queue keyed by project, namespace and name; counts are read
// with clients of the quota's own project, made per work item.
package resourcequota

import (
	"context"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/manager"
)

// Name is the controller's name in the registry of controllers.
const Name = "resourcequota"

// Resync is how often every quota's usage is counted again.
const Resync = 5 * time.Minute

// legacyCountNames are the pre-"count/" quota names of core resources.
var legacyCountNames = map[string]bool{"configmaps": true, "secrets": true, "services": true,
	"persistentvolumeclaims": true, "replicationcontrollers": true, "resourcequotas": true}

// Controller keeps ResourceQuota status.
type Controller struct {
	clients            *allprojects.Clients
	platform, projects allprojects.ResourceLists
}

// New prepares the controller.
func New(clients *allprojects.Clients) *Controller { return &Controller{clients: clients} }

func newREST(cfg *rest.Config, hc *http.Client) (rest.Interface, error) {
	c, err := corev1client.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return c.RESTClient(), nil
}

type term struct {
	*Controller
	quotas [2]cache.SharedIndexInformer
}

// Run works until ctx ends.
func (ctl *Controller) Run(ctx context.Context, workers int) {
	t := &term{Controller: ctl}
	queue := manager.NewTenantQueue[allprojects.Key](Name)
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if k, ok := allprojects.KeyOf(obj, false); ok {
			queue.Add(k)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			o, okOld := oldObj.(*corev1.ResourceQuota)
			n, okNew := newObj.(*corev1.ResourceQuota)
			// A resync, or a change of what the quota limits; not the status
			// writes of admission and of this controller.
			if okOld && okNew && (o.ResourceVersion == n.ResourceVersion || !equality.Semantic.DeepEqual(o.Spec, n.Spec)) {
				enqueue(newObj)
			}
		},
	}
	for view, allProjects := range []bool{false, true} {
		inf, err := ctl.clients.Informer(newREST, "resourcequotas", &corev1.ResourceQuota{}, allProjects, nil, nil)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Preparing informer", "controller", Name)
			return
		}
		if _, err := inf.AddEventHandlerWithResyncPeriod(handler, Resync); err != nil {
			klog.FromContext(ctx).Error(err, "Registering event handler", "controller", Name)
			return
		}
		t.quotas[view] = inf
	}
	if !manager.StartInformers(ctx, Name, nil, t.quotas[0], t.quotas[1]) {
		return
	}
	manager.Work(ctx, Name, queue, workers, t.sync)
}

func (t *term) sync(ctx context.Context, key allprojects.Key) error {
	ctx = allprojects.Within(ctx, key)
	view, lists := 0, &t.platform
	if key.Project != "" {
		view, lists = 1, &t.projects
	}
	obj, exists, err := t.quotas[view].GetStore().GetByKey(key.StoreKey())
	if err != nil || !exists {
		return err
	}
	quota := obj.(*corev1.ResourceQuota)
	cfg := t.clients.Config(key.Project)
	resources, err := lists.Get(func() (discovery.DiscoveryInterface, error) {
		return discovery.NewDiscoveryClientForConfigAndClient(cfg, t.clients.HTTPClient())
	})
	if len(resources) == 0 && err != nil {
		return err
	}
	meta, err := metadata.NewForConfigAndClient(cfg, t.clients.HTTPClient())
	if err != nil {
		return err
	}
	used := corev1.ResourceList{}
	for name := range quota.Spec.Hard {
		gr, counted := CountedResource(name)
		if !counted || len(quota.Spec.Scopes) > 0 || quota.Spec.ScopeSelector != nil {
			used[name] = *resource.NewQuantity(0, resource.DecimalSI)
			continue
		}
		gvr, served := versionOf(resources, gr)
		if !served && key.Project != "" {
			gvr, served = projectKind(ctx, cfg, t.clients.HTTPClient(), gr)
		}
		if !served {
			used[name] = *resource.NewQuantity(0, resource.DecimalSI)
			continue
		}
		n, err := count(ctx, meta, gvr, key.Namespace)
		if apierrors.IsNotFound(err) && key.Project != "" {
			// The shared discovery (another project's, within seconds)
			// named a kind another project defines, at a version this
			// project does not serve: this project's own discovery says.
			if own, ok := projectKind(ctx, cfg, t.clients.HTTPClient(), gr); ok && own != gvr {
				n, err = count(ctx, meta, own, key.Namespace)
			} else if !ok {
				n, err = 0, nil
			}
		}
		if err != nil {
			return err
		}
		used[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	if equality.Semantic.DeepEqual(quota.Status.Hard, quota.Spec.Hard) && equality.Semantic.DeepEqual(quota.Status.Used, used) {
		return nil
	}
	core, err := corev1client.NewForConfigAndClient(cfg, t.clients.HTTPClient())
	if err != nil {
		return err
	}
	fresh, err := core.ResourceQuotas(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	fresh.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard.DeepCopy(), Used: used}
	if _, err := core.ResourceQuotas(key.Namespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err // a conflict is retried: the count is taken again
	}
	return nil
}

// CountedResource returns the resource an object-count quota name limits:
// count/<resource>[.<group>], or a legacy core name such as "configmaps".
func CountedResource(name corev1.ResourceName) (schema.GroupResource, bool) {
	if rest, ok := strings.CutPrefix(string(name), "count/"); ok {
		r, g, _ := strings.Cut(rest, ".")
		return schema.GroupResource{Group: g, Resource: r}, r != ""
	}
	if legacyCountNames[string(name)] {
		return schema.GroupResource{Resource: string(name)}, true
	}
	return schema.GroupResource{}, false
}

// projectKind finds gr among the kinds the project of cfg defines for
// itself (--project-crds), which the projects' shared discovery does not
// list: its group's document, then its preferred version's resources. Asked
// only for a quota naming a resource the platform does not serve a project.
func projectKind(ctx context.Context, cfg *rest.Config, hc *http.Client, gr schema.GroupResource) (schema.GroupVersionResource, bool) {
	if gr.Group == "" {
		return schema.GroupVersionResource{}, false
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return schema.GroupVersionResource{}, false
	}
	var group metav1.APIGroup
	if err := dc.RESTClient().Get().AbsPath("/apis", gr.Group).Do(ctx).Into(&group); err != nil || group.PreferredVersion.GroupVersion == "" {
		return schema.GroupVersionResource{}, false
	}
	list, err := dc.ServerResourcesForGroupVersion(group.PreferredVersion.GroupVersion)
	if err != nil {
		return schema.GroupVersionResource{}, false
	}
	return versionOf([]*metav1.APIResourceList{list}, gr)
}

func versionOf(lists []*metav1.APIResourceList, gr schema.GroupResource) (schema.GroupVersionResource, bool) {
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil || gv.Group != gr.Group {
			continue
		}
		for _, r := range l.APIResources {
			if r.Name == gr.Resource && r.Namespaced {
				return gv.WithResource(r.Name), true
			}
		}
	}
	return schema.GroupVersionResource{}, false
}

// count counts a resource's objects in a namespace, a page at a time.
func count(ctx context.Context, client metadata.Interface, gvr schema.GroupVersionResource, namespace string) (int64, error) {
	var n int64
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := client.Resource(gvr).Namespace(namespace).List(ctx, opts)
		if apierrors.IsNotFound(err) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		n += int64(len(list.Items))
		if list.Continue == "" {
			return n, nil
		}
		opts.Continue = list.Continue
	}
}
