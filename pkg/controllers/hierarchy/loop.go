package hierarchy

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers/events"
	"go.miloapis.com/milo/pkg/controllers/manager"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/tenancy"
)

// loop is one work queue over one shared informer. Its event handler is
// registered for as long as it runs, so a controller that loses leadership and
// later regains it does not leave handlers behind.
type loop struct {
	name     string
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	sync     func(ctx context.Context, obj *unstructured.Unstructured) error
	// idle, if set, tells from the cached object that sync has nothing to
	// do, before the object is converted for it: a resync hands the loops
	// every project.
	idle func(obj any) bool
	// events, if set, hears of sync failures: its owners see them as Events.
	events *events.Recorder
}

// newLoop returns a loop whose queue serves organizations in turn: an
// organization creating ten thousand projects delays another's one project
// by at most one key of each organization with work waiting.
func newLoop(name string, informer cache.SharedIndexInformer, sync func(context.Context, *unstructured.Unstructured) error) *loop {
	l := &loop{name: name, informer: informer, sync: sync}
	l.queue = manager.NewFairQueue(name, l.organizationOf, workqueue.DefaultTypedControllerRateLimiter[string]())
	return l
}

// organizationOf is the organization of the object queued as key, read
// from the informer; "" for an object it no longer holds, whose key is
// served in the platform's turn.
func (l *loop) organizationOf(key string) string {
	obj, exists, err := l.informer.GetStore().GetByKey(key)
	if err != nil || !exists {
		return ""
	}
	return keyOf(obj, key).organization
}

func (l *loop) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		l.queue.Add(key)
	}
}

// changed queues an object the informer added or updated, unless it has
// nothing to do: the informer's first fill (every project, when the
// process starts) then costs no queue entry, and next drops a key whose
// object became idle while it waited.
func (l *loop) changed(obj any) {
	if l.idle != nil && l.idle(obj) {
		return
	}
	l.enqueue(obj)
}

// run works the queue with the given number of workers until ctx ends, and
// returns once every worker has stopped.
func (l *loop) run(ctx context.Context, workers int) {
	reg, err := l.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: l.changed, UpdateFunc: func(_, o any) { l.changed(o) }})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Registering event handler", "controller", l.name)
		return
	}
	defer l.informer.RemoveEventHandler(reg) //nolint:errcheck
	defer l.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced, reg.HasSynced) {
		return
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for l.next(ctx) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	l.queue.ShutDown()
	wg.Wait()
}

func (l *loop) next(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	obj, exists, err := l.informer.GetStore().GetByKey(key)
	// An object with nothing to do (every Ready project, each queued once
	// when the server starts) costs no trace span and no copy.
	if err == nil && exists && (l.idle == nil || !l.idle(obj)) {
		var end func(error)
		k := keyOf(obj, key)
		ctx, end = manager.Begin(ctx, l.name, k)
		// The informers hold the hierarchy's kinds as Go types; the
		// controllers edit a copy as unstructured, as they do other kinds.
		var u *unstructured.Unstructured
		if u, err = hierarchy.AsUnstructured(obj); err == nil {
			err = l.sync(ctx, u)
		}
		var waiting errWaiting
		if errors.As(err, &waiting) {
			end(manager.Waiting{Reason: err.Error()}) // not a failure
		} else {
			end(err)
		}
		if err != nil && !errors.As(err, &waiting) && ctx.Err() == nil && l.events != nil && u != nil {
			l.events.HierarchyEventf(k.organization, u, corev1.EventTypeWarning, "SyncFailed", "%v", err)
		}
	}
	var waiting errWaiting
	if errors.As(err, &waiting) {
		l.queue.AddAfter(key, 2*time.Second)
		return true
	}
	if err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "Syncing")
		l.queue.AddRateLimited(key)
		return true
	}
	l.queue.Forget(key)
	return true
}

// objectKey is the key of a hierarchy object, with the tenant it belongs to.
type objectKey struct{ key, project, organization string }

func (k objectKey) String() string                             { return k.key }
func (k objectKey) TenantKeys() (project, organization string) { return k.project, k.organization }

// keyOf tells which project and organization obj is about.
func keyOf(obj any, key string) objectKey {
	m := hierarchy.Object(obj)
	if m == nil {
		return objectKey{key: key}
	}
	var org string
	if u, ok := obj.(*unstructured.Unstructured); ok {
		// Read in place: GetLabels copies the map, and the queue asks under its lock.
		org, _, _ = unstructured.NestedString(u.Object, "metadata", "labels", tenancy.OrganizationLabel)
	} else {
		org = m.GetLabels()[tenancy.OrganizationLabel]
	}
	k := objectKey{key: key, organization: org}
	switch hierarchy.KindOf(obj) {
	case "Project":
		k.project = m.GetName()
	case "Organization":
		k.organization = m.GetName()
	default:
		if org, ok := tenancy.OrganizationOfNamespace(m.GetNamespace()); ok {
			k.organization = org
		}
	}
	return k
}

// errWaiting asks for the object to be synced again a little later.
type errWaiting struct{ msg string }

func (e errWaiting) Error() string { return e.msg }

// addFinalizers adds the finalizers obj lacks and reports whether it wrote.
// A conflict is not an error: the newer version is queued and will be synced.
func addFinalizers(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, finalizers ...string) (bool, error) {
	missing := slices.DeleteFunc(slices.Clone(finalizers), func(f string) bool { return slices.Contains(obj.GetFinalizers(), f) })
	if len(missing) == 0 {
		return false, nil
	}
	updated := obj.DeepCopy()
	updated.SetFinalizers(append(updated.GetFinalizers(), missing...))
	_, err := client.Resource(gvr).Namespace(obj.GetNamespace()).Update(ctx, updated, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsConflict(err) {
		err = nil
	}
	return true, err
}

// removeFinalizer releases obj from one finalizer. A conflict is not an error:
// the newer version is queued and will be synced.
func removeFinalizer(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, finalizer string) error {
	_, err := removedFinalizer(ctx, client, gvr, obj, finalizer)
	return err
}

// removedFinalizer is removeFinalizer, of one finalizer or several in one
// write, reporting whether this call removed them (not a conflicting writer,
// not another replica), so that what follows a removal — an Event, a
// duration — happens once.
func removedFinalizer(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, finalizers ...string) (bool, error) {
	if !slices.ContainsFunc(obj.GetFinalizers(), func(f string) bool { return slices.Contains(finalizers, f) }) {
		return false, nil
	}
	updated := obj.DeepCopy()
	updated.SetFinalizers(slices.DeleteFunc(updated.GetFinalizers(), func(f string) bool { return slices.Contains(finalizers, f) }))
	_, err := client.Resource(gvr).Namespace(obj.GetNamespace()).Update(ctx, updated, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

const fieldManager = "milo-hierarchy"
