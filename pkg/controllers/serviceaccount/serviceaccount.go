// Package serviceaccount gives every namespace, in every project and on the
// platform, what Kubernetes' service account controller and root CA
// publisher give a cluster's: a `default` ServiceAccount and the
// `kube-root-ca.crt` ConfigMap holding the CA that signs the server's serving
// certificate. Both are put back when deleted, and the ConfigMap when edited.
//
// Informers over the all-projects view and the platform watch namespaces, the
// ServiceAccounts named `default` and the ConfigMaps named `kube-root-ca.crt`
// only (a field selector each, so nothing else is cached); one queue keyed by
// project and namespace, a fixed pool of workers, and clients of the
// namespace's own project made for a work item that writes. A new project's
// namespaces are stored with their ServiceAccount and ConfigMap; the controller
// waits briefly for its informers to see them (bootstrapWait) rather than
// send creates the server would refuse.
package serviceaccount

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/manager"
	"go.miloapis.com/milo/pkg/projectbootstrap"
)

// Name is the controller's name in the registry of controllers.
const Name = "serviceaccount"

// Names of what every namespace gets.
const (
	DefaultServiceAccount = projectbootstrap.DefaultServiceAccount
	RootCAConfigMap       = projectbootstrap.RootCAConfigMap
	rootCAKey             = projectbootstrap.RootCAKey
)

// Controller keeps every namespace's default ServiceAccount and root CA ConfigMap.
type Controller struct {
	clients *allprojects.Clients
	rootCA  string
	// published is the data of every kube-root-ca.crt as published: the
	// informer's copies that hold it share this one map (see keep).
	published map[string]string
}

// New prepares the controller; rootCA is the PEM bundle published in every namespace.
func New(clients *allprojects.Clients, rootCA []byte) *Controller {
	return &Controller{clients: clients, rootCA: string(rootCA), published: map[string]string{rootCAKey: string(rootCA)}}
}

// keep reduces a kube-root-ca.crt the informer caches to what sync compares:
// its identity (allprojects.Slim) and its data, which is the one shared map
// published whenever it says what is published — in every namespace but one
// just edited. So a namespace costs the informer a few hundred bytes, not a
// copy of the CA bundle.
func (ctl *Controller) keep(obj any) (any, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		cm.TypeMeta = metav1.TypeMeta{}
		allprojects.Slim(&cm.ObjectMeta)
		if len(cm.BinaryData) == 0 && len(cm.Data) == 1 && cm.Data[rootCAKey] == ctl.rootCA {
			cm.Data = ctl.published
		}
	}
	return obj, nil
}

// term is one term of the controller: informers live as long as it leads.
type term struct {
	*Controller
	// per view (platform, all projects): namespaces, service accounts, config maps
	namespaces, accounts, configMaps [2]cache.SharedIndexInformer
	// accountsSeen and configMapsSeen are, per view, the newest resource
	// version the informers of service accounts and config maps have handed
	// their handlers (their stores hold everything up to it).
	accountsSeen, configMapsSeen [2]atomic.Uint64
}

// bootstrapWait is how long after a project's bootstrap namespace is created
// the controller waits for its informers to catch up with it before it
// creates what the namespace seems to lack. The server stores a new project's
// namespaces with their ServiceAccount and root CA ConfigMap in one
// transaction, so all three share a resource version; the namespace's event
// can reach the controller before the others reach its informers, and a
// create then is refused (409) — a request wasted on every such namespace.
const bootstrapWait = 3 * time.Second

// bootstrapRetry is how soon a namespace waiting for the informers is looked
// at again.
const bootstrapRetry = 100 * time.Millisecond

// resourceVersion is obj's resource version as a number (0 if it has none).
func resourceVersion(obj any) uint64 {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	rv, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	return rv
}

// waitsForBootstrap reports whether what namespace ns (named name in its
// project) seems to lack may only not have reached an informer yet, which has
// handed out resource versions up to seen: ns is a project's bootstrap
// namespace, created less than bootstrapWait before now, newer than seen.
func waitsForBootstrap(inProject bool, name string, ns metav1.Object, seen uint64, now time.Time) bool {
	return inProject && slices.Contains(projectbootstrap.Namespaces, name) &&
		now.Sub(ns.GetCreationTimestamp().Time) < bootstrapWait && seen < resourceVersion(ns)
}

// noting returns a handler that raises seen to the resource version of what
// it is handed.
func noting(seen *atomic.Uint64) func(any) {
	return func(obj any) {
		rv := resourceVersion(obj)
		for {
			old := seen.Load()
			if rv <= old || seen.CompareAndSwap(old, rv) {
				return
			}
		}
	}
}

// Run works until ctx ends.
func (ctl *Controller) Run(ctx context.Context, workers int) {
	t := &term{Controller: ctl}
	queue := manager.NewTenantQueue[allprojects.Key](Name)
	defer queue.ShutDown()
	namespaceChanged := func(obj any) {
		if k, ok := allprojects.KeyOf(obj, true); ok {
			queue.Add(k)
		}
	}
	// A change of what a namespace holds queues the namespace.
	contentChanged := func(obj any) {
		if k, ok := allprojects.KeyOf(obj, false); ok {
			queue.Add(allprojects.Key{Project: k.Project, ID: k.ID, Name: k.Namespace})
		}
	}
	for view, allProjects := range []bool{false, true} {
		var err error
		if t.namespaces[view], err = ctl.clients.MetadataInformer(ctx, corev1.SchemeGroupVersion.WithResource("namespaces"), allProjects, nil); err == nil {
			t.accounts[view], err = ctl.clients.MetadataInformer(ctx, corev1.SchemeGroupVersion.WithResource("serviceaccounts"), allProjects,
				fields.OneTermEqualSelector("metadata.name", DefaultServiceAccount))
		}
		if err == nil {
			t.configMaps[view], err = ctl.clients.CoreInformer("configmaps", &corev1.ConfigMap{}, allProjects,
				fields.OneTermEqualSelector("metadata.name", RootCAConfigMap), ctl.keep)
		}
		if err != nil {
			klog.FromContext(ctx).Error(err, "Preparing informer", "controller", Name)
			return
		}
		content := func(seen *atomic.Uint64) cache.ResourceEventHandlerFuncs {
			note := noting(seen)
			return cache.ResourceEventHandlerFuncs{AddFunc: note,
				UpdateFunc: func(_, o any) { note(o); contentChanged(o) },
				DeleteFunc: func(o any) { note(o); contentChanged(o) }}
		}
		if !manager.StartInformers(ctx, Name, cache.ResourceEventHandlerFuncs{AddFunc: namespaceChanged, UpdateFunc: func(_, o any) { namespaceChanged(o) }}, t.namespaces[view]) ||
			!manager.StartInformers(ctx, Name, content(&t.accountsSeen[view]), t.accounts[view]) ||
			!manager.StartInformers(ctx, Name, content(&t.configMapsSeen[view]), t.configMaps[view]) {
			return
		}
	}
	manager.Work(ctx, Name, queue, workers, t.sync)
}

// sync puts what the namespace of key lacks into it, with a client of its own project.
func (t *term) sync(ctx context.Context, ns allprojects.Key) error {
	ctx = allprojects.Within(ctx, ns)
	view := 0
	if ns.Project != "" {
		view = 1
	}
	obj, exists, err := t.namespaces[view].GetStore().GetByKey(ns.StoreKey())
	if err != nil || !exists {
		return err
	}
	m, ok := obj.(metav1.Object)
	if !ok || m.GetDeletionTimestamp() != nil {
		return nil // nothing new in a namespace being deleted
	}
	behind := func(seen *atomic.Uint64) bool {
		return waitsForBootstrap(view == 1, ns.Name, m, seen.Load(), time.Now())
	}
	// The project's client, made only when there is something to write.
	client := sync.OnceValues(func() (kubernetes.Interface, error) {
		return kubernetes.NewForConfigAndClient(t.clients.Config(ns.Project), t.clients.HTTPClient())
	})
	in := func(name string) string {
		return allprojects.Key{Project: ns.Project, ID: ns.ID, Namespace: ns.Name, Name: name}.StoreKey()
	}
	if _, exists, _ := t.accounts[view].GetStore().GetByKey(in(DefaultServiceAccount)); !exists {
		if behind(&t.accountsSeen[view]) {
			return manager.RetryAfter{After: bootstrapRetry, Reason: "waiting for the ServiceAccounts stored with the namespace"}
		}
		c, err := client()
		if err != nil {
			return err
		}
		_, err = c.CoreV1().ServiceAccounts(ns.Name).Create(ctx, projectbootstrap.ServiceAccount(ns.Name), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) && !terminating(err) {
			return err
		}
	}
	cached, exists, _ := t.configMaps[view].GetStore().GetByKey(in(RootCAConfigMap))
	want := map[string]string{rootCAKey: t.rootCA}
	if !exists {
		if behind(&t.configMapsSeen[view]) {
			return manager.RetryAfter{After: bootstrapRetry, Reason: "waiting for the ConfigMaps stored with the namespace"}
		}
		c, err := client()
		if err != nil {
			return err
		}
		_, err = c.CoreV1().ConfigMaps(ns.Name).Create(ctx, projectbootstrap.RootCA(ns.Name, t.rootCA), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) && !terminating(err) {
			return err
		}
		return nil
	}
	if cm, ok := cached.(*corev1.ConfigMap); ok && (len(cm.Data) != 1 || cm.Data[rootCAKey] != t.rootCA || len(cm.BinaryData) != 0) {
		c, err := client()
		if err != nil {
			return err
		}
		fresh, err := c.CoreV1().ConfigMaps(ns.Name).Get(ctx, RootCAConfigMap, metav1.GetOptions{})
		if err != nil {
			return client404(err)
		}
		fresh.Data, fresh.BinaryData = want, nil
		if _, err := c.CoreV1().ConfigMaps(ns.Name).Update(ctx, fresh, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return client404(err)
		}
	}
	return nil
}

// terminating reports a refusal because the namespace is being deleted: the
// namespace's next event, if it lives on, queues it again.
func terminating(err error) bool {
	return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
