// Package crdcleanup removes every project's instances of a custom resource when
// its CustomResourceDefinition is deleted.
//
// Deleting a CRD makes the apiserver delete its instances first — but only the
// platform's, since it lists them without a tenant. Instances stored in projects
// would stay in etcd and reappear if a CRD of the same name came back. So every
// CRD carries Milo's finalizer; when a CRD is being deleted, this controller
// range-deletes the resource's whole key prefix, every tenant at once, and then
// releases the finalizer. While the CRD is terminating no instance can be created
// and no CRD of the same name can exist, so nothing new is lost.
//
// One shared informer on CRDs and one worker; nothing per project.
package crdcleanup

import (
	"context"
	"fmt"
	"slices"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
)

// Finalizer keeps a CRD until every project's instances are gone.
const Finalizer = "tenancy.miloapis.com/project-instances"

// Controller keeps Milo's finalizer on CRDs and purges deleted CRDs' resources.
type Controller struct {
	crds       apiextensionsinformers.CustomResourceDefinitionInformer
	client     apiextensionsclient.CustomResourceDefinitionInterface
	keys       keyranges.Store
	etcdPrefix string
	queue      workqueue.TypedRateLimitingInterface[string]
	// Purged, if set, is called after instances were deleted in etcd,
	// behind the storage layer's back (its meters count them no more).
	Purged func()
}

// New returns a controller over the shared CRD informer; etcdPrefix is the API
// server's --etcd-prefix.
func New(crds apiextensionsinformers.CustomResourceDefinitionInformer, client apiextensionsclient.CustomResourceDefinitionInterface, keys keyranges.Store, etcdPrefix string) (*Controller, error) {
	c := &Controller{
		crds: crds, client: client, keys: keys, etcdPrefix: etcdPrefix,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "crd_project_instances"}),
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, err := crds.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	return c, err
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.crds.Informer().HasSynced) {
		return
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for c.next(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (c *Controller) next(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	if err := c.sync(ctx, name); err != nil {
		klog.FromContext(ctx).Error(err, "Syncing CRD project instances", "crd", name)
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

func (c *Controller) sync(ctx context.Context, name string) error {
	crd, err := c.crds.Lister().Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	has := slices.Contains(crd.Finalizers, Finalizer)
	switch {
	case crd.DeletionTimestamp == nil && !has:
		return c.setFinalizer(ctx, name, true)
	case crd.DeletionTimestamp != nil && has:
		// The apiserver's own cleanup of the platform's instances may still run; the
		// range delete covers those too.
		_, err := Purge(ctx, c.keys, c.etcdPrefix, crd.Spec.Group, crd.Spec.Names.Plural)
		// Told even of a purge that failed part way: some keys may be gone.
		if c.Purged != nil {
			c.Purged()
		}
		if err != nil {
			return err
		}
		return c.setFinalizer(ctx, name, false)
	}
	return nil
}

func (c *Controller) setFinalizer(ctx context.Context, name string, present bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := c.client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		has := slices.Contains(crd.Finalizers, Finalizer)
		switch {
		case present && !has && crd.DeletionTimestamp == nil:
			crd.Finalizers = append(crd.Finalizers, Finalizer)
		case !present && has:
			crd.Finalizers = slices.DeleteFunc(crd.Finalizers, func(f string) bool { return f == Finalizer })
		default:
			return nil
		}
		_, err = c.client.Update(ctx, crd, metav1.UpdateOptions{FieldManager: "milo-crd-cleanup"})
		return err
	})
}

// Purge deletes every tenant's instances of one custom resource, directly in storage.
func Purge(ctx context.Context, keys keyranges.Store, etcdPrefix, group, plural string) (int64, error) {
	if group == "" || plural == "" {
		return 0, fmt.Errorf("purge: empty group or resource")
	}
	prefix := tenantstorage.CustomResourcePrefix(etcdPrefix, group, plural) + "/"
	deleted, err := keys.DeletePrefixes(ctx, prefix)
	if err != nil {
		return deleted, fmt.Errorf("purging %s: %w", prefix, err)
	}
	klog.FromContext(ctx).Info("Purged the instances of a deleted CRD in every project", "group", group, "resource", plural, "keys", deleted)
	return deleted, nil
}
