// Package crdlifecycle runs the lifecycle of the CustomResourceDefinitions
// projects define, as Kubernetes' naming and finalizer controllers do for a
// cluster's.
//
// Naming: each CRD gets status.acceptedNames and the NamesAccepted and
// Established conditions, with upstream's reasons. A project's CRDs compete for names
// only with the project's other CRDs of their group — never with another
// project's. A group belongs to the platform or to projects: a project CRD
// in a group the platform serves (built-in kinds, Milo's, platform CRDs,
// aggregated APIs) is refused its names (GroupConflict), unless it was
// accepted before the platform served the group; it keeps what it holds.
//
// Deletion: the apiserver marks a deleted CRD with upstream's
// customresourcecleanup finalizer; this controller deletes the CRD's
// instances in its project, waits until they are gone, and removes it.
//
// One informer over the all-projects view holds every project's CRDs,
// reduced to their names and conditions (a CRD's schemas can be tens of
// kilobytes, and 100,000 projects may each define the same twenty); the work
// queue is keyed by project and group, so the CRDs of one group of one
// project are decided by one worker at a time, in order of creation, and two
// of them never take the same name at once.
package crdlifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/manager"
	"go.miloapis.com/milo/pkg/projectcrds"
)

// Name is the controller's name in the registry of controllers.
const Name = "project-crd-lifecycle"

// established is the Established condition of a project CRD whose names are
// accepted, as upstream's establishing controller sets it: the server serves
// a project CRD as soon as its names are accepted.
var established = apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue,
	Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"}

// notAccepted is the Established condition of a CRD refused its names.
var notAccepted = apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse,
	Reason: "NotAccepted", Message: "not all names are accepted"}

// groupConflict is the NamesAccepted condition of a project CRD in a group the platform serves.
func groupConflict(group string) apiextensionsv1.CustomResourceDefinitionCondition {
	return apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionFalse,
		Reason: "GroupConflict", Message: fmt.Sprintf("the group %q is served by the platform; a project defines its kinds in a group of its own", group)}
}

// Controller accepts project CRDs' names.
type Controller struct {
	clients *allprojects.Clients
}

// New prepares the controller.
func New(clients *allprojects.Clients) *Controller {
	return &Controller{clients: clients}
}

type term struct {
	*Controller
	crds     cache.SharedIndexInformer
	platform *platformGroups
	queue    workqueue.TypedRateLimitingInterface[allprojects.Key]
}

// platformGroupOnly keeps of a platform CRD its group.
func platformGroupOnly(obj any) (any, error) {
	if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
		return &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.Name, ResourceVersion: crd.ResourceVersion},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: crd.Spec.Group}}, nil
	}
	return obj, nil
}

// Run works until ctx ends.
func (ctl *Controller) Run(ctx context.Context, workers int) {
	crds, err := ctl.clients.ProjectCRDs(ctx)
	var platform cache.SharedIndexInformer
	if err == nil {
		platform, err = ctl.clients.Informer(allprojects.CRDREST, "customresourcedefinitions", &apiextensionsv1.CustomResourceDefinition{}, false, nil, platformGroupOnly)
	}
	if err == nil {
		err = allprojects.IndexCRDsByGroup(platform)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Preparing informers", "controller", Name)
		return
	}
	t := &term{Controller: ctl, crds: crds, platform: &platformGroups{clients: ctl.clients, crds: platform}, queue: manager.NewTenantQueue[allprojects.Key](Name)}
	defer t.queue.ShutDown()
	changed := func(obj any) {
		if k, ok := allprojects.KeyOf(obj, true); ok && k.Project != "" {
			if crd, ok := tombstoned(obj); ok {
				k.Name = crd.Spec.Group
				t.queue.Add(k)
			}
		}
	}
	if !manager.StartInformers(ctx, Name, cache.ResourceEventHandlerFuncs{AddFunc: changed, UpdateFunc: func(_, o any) { changed(o) }, DeleteFunc: changed}, crds) ||
		!manager.StartInformers(ctx, Name, nil, platform) {
		return
	}
	manager.Work(ctx, Name, t.queue, workers, t.sync)
}

func tombstoned(obj any) (*apiextensionsv1.CustomResourceDefinition, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	return crd, ok
}

// sync decides the names of every CRD of one group (key.Name) of one project.
func (t *term) sync(ctx context.Context, key allprojects.Key) error {
	ctx = allprojects.Within(ctx, key)
	group := key.Name
	objs, err := t.crds.GetIndexer().ByIndex(allprojects.ByProject, key.ID)
	if err != nil {
		return err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, o := range objs {
		if crd, ok := o.(*apiextensionsv1.CustomResourceDefinition); ok && crd.Spec.Group == group {
			crds = append(crds, crd.DeepCopy())
		}
	}
	if len(crds) == 0 {
		return nil
	}
	// The older CRD keeps a name two ask for, as on a cluster where the
	// older was accepted first.
	slices.SortFunc(crds, func(a, b *apiextensionsv1.CustomResourceDefinition) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	platformServes, err := t.platform.serves(group)
	if err != nil {
		return err
	}
	// A deletion still under way (its instances' finalizers are the
	// tenant's) does not hold up the naming of the group's other CRDs: its
	// error is returned once they are named.
	var deleting error
	for _, crd := range crds {
		if crd.DeletionTimestamp != nil && slices.Contains(crd.Finalizers, apiextensionsv1.CustomResourceCleanupFinalizer) {
			err := t.deleteInstances(ctx, key, crd)
			if err == nil {
				err = t.finalize(ctx, key, crd.Name)
			}
			if err != nil && deleting == nil {
				deleting = err
			}
		}
	}
	for i, crd := range crds {
		var taken projectcrds.Taken
		for j, other := range crds {
			if j != i {
				taken.Claim(other.Status.AcceptedNames)
			}
		}
		names, accepted, isEstablished := projectcrds.AcceptNames(crd, taken)
		if platformServes && crd.Status.AcceptedNames.Plural == "" {
			names, accepted, isEstablished = crd.Status.AcceptedNames, groupConflict(group), notAccepted
		}
		if isEstablished.Status != apiextensionsv1.ConditionTrue && accepted.Status == apiextensionsv1.ConditionTrue {
			isEstablished = established
		}
		if equality.Semantic.DeepEqual(names, crd.Status.AcceptedNames) && hasCondition(crd, accepted) && hasCondition(crd, isEstablished) {
			continue
		}
		written, err := t.write(ctx, key, crd.Name, names, accepted, isEstablished)
		if err != nil {
			return err
		}
		if written != nil {
			crds[i].Status.AcceptedNames = written.Status.AcceptedNames
		}
	}
	return deleting
}

// write sets a CRD's accepted names and conditions, through its project.
func (t *term) write(ctx context.Context, key allprojects.Key, name string, names apiextensionsv1.CustomResourceDefinitionNames, conditions ...apiextensionsv1.CustomResourceDefinitionCondition) (*apiextensionsv1.CustomResourceDefinition, error) {
	client, err := apiextensionsclient.NewForConfigAndClient(t.clients.Config(key.Project), t.clients.HTTPClient())
	if err != nil {
		return nil, err
	}
	fresh, err := client.CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fresh.Status.AcceptedNames = names
	for _, c := range conditions {
		apiextensionshelpers.SetCRDCondition(fresh, c)
	}
	// A conflict is an error: the queue tries again with what the informer has seen since.
	return client.CustomResourceDefinitions().UpdateStatus(ctx, fresh, metav1.UpdateOptions{FieldManager: Name})
}

// deleteInstances deletes every instance of a deleted CRD in its project,
// through the project's URL (the server serves a deleting CRD, except for
// creates), and returns nil once none is left: instances with finalizers of
// their own are waited for, as upstream's finalizer controller waits. It
// reads the instances' metadata a page at a time, where upstream lists
// every whole instance at once: a project's kind may hold many large objects.
func (t *term) deleteInstances(ctx context.Context, key allprojects.Key, crd *apiextensionsv1.CustomResourceDefinition) error {
	version := allprojects.ServedVersion(crd)
	if version == "" || crd.Status.AcceptedNames.Plural == "" {
		return nil // never served: no instance was ever made
	}
	client, err := metadata.NewForConfigAndClient(t.clients.Config(key.Project), t.clients.HTTPClient())
	if err != nil {
		return err
	}
	resource := client.Resource(schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Status.AcceptedNames.Plural})
	// Instances already being deleted wait on their own finalizers (the
	// tenant's): they are counted, not deleted again.
	found, issued, more := 0, 0, false
	opts := metav1.ListOptions{Limit: instancesPage}
	for {
		page, err := resource.List(ctx, opts)
		if apierrors.IsNotFound(err) && found == 0 {
			return nil
		}
		if apierrors.IsResourceExpired(err) && found > 0 {
			more = true // the list's snapshot was compacted: the next round lists anew
			break
		}
		if err != nil {
			return err
		}
		for _, item := range page.Items {
			found++
			if item.GetDeletionTimestamp() != nil {
				continue
			}
			var err error
			if ns := item.GetNamespace(); ns != "" {
				err = resource.Namespace(ns).Delete(ctx, item.GetName(), metav1.DeleteOptions{})
			} else {
				err = resource.Delete(ctx, item.GetName(), metav1.DeleteOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			issued++
		}
		if page.Continue == "" {
			break
		}
		if issued >= deletesPerSync {
			more = true
			break
		}
		opts.Continue = page.Continue
	}
	switch {
	case found == 0:
		return nil
	case more && issued > 0:
		// Not the tenant's finalizers: more to delete, after the queue's other work.
		return manager.RetryAfter{After: time.Second, Reason: fmt.Sprintf("%d instances of %s deleted, more left", issued, crd.Name)}
	}
	return manager.Waiting{Reason: fmt.Sprintf("%d instances of %s are being deleted", found, crd.Name)}
}

// instancesPage is how many instances' metadata one list of deleteInstances
// reads, and deletesPerSync how many deletes one round sends before it lets
// the queue's other work go first.
const (
	instancesPage  = 500
	deletesPerSync = 10000
)

// finalize removes upstream's cleanup finalizer from a deleted CRD whose
// instances are gone, so that it goes.
func (t *term) finalize(ctx context.Context, key allprojects.Key, name string) error {
	client, err := apiextensionsclient.NewForConfigAndClient(t.clients.Config(key.Project), t.clients.HTTPClient())
	if err != nil {
		return err
	}
	fresh, err := client.CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	fresh.Finalizers = slices.DeleteFunc(fresh.Finalizers, func(f string) bool { return f == apiextensionsv1.CustomResourceCleanupFinalizer })
	_, err = client.CustomResourceDefinitions().UpdateStatus(ctx, fresh, metav1.UpdateOptions{FieldManager: Name})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func hasCondition(crd *apiextensionsv1.CustomResourceDefinition, want apiextensionsv1.CustomResourceDefinitionCondition) bool {
	c := apiextensionshelpers.FindCRDCondition(crd, want.Type)
	return c != nil && c.Status == want.Status && c.Reason == want.Reason && c.Message == want.Message
}

// platformGroups are the groups the platform serves: those discovery lists,
// from one discovery of the platform kept for a few seconds (every project
// sees the same), and those of the platform's CRDs, from an informer (a CRD
// the platform has just installed may not be in discovery yet).
type platformGroups struct {
	clients *allprojects.Clients
	crds    cache.SharedIndexInformer

	mu     sync.Mutex
	groups sets.Set[string]
	at     time.Time
}

func (p *platformGroups) serves(group string) (bool, error) {
	if objs, err := p.crds.GetIndexer().ByIndex(allprojects.ByGroup, group); err != nil || len(objs) > 0 {
		return len(objs) > 0, err
	}
	p.mu.Lock()
	groups, fresh := p.groups, time.Since(p.at) < 10*time.Second
	p.mu.Unlock()
	if groups == nil || !fresh {
		// Asked without the lock: other workers go on with the groups they have.
		disco, err := discovery.NewDiscoveryClientForConfigAndClient(p.clients.Config(""), p.clients.HTTPClient())
		if err != nil {
			return false, err
		}
		list, err := disco.ServerGroups()
		if err != nil {
			return false, err
		}
		groups = sets.New[string]()
		for _, g := range list.Groups {
			groups.Insert(g.Name)
		}
		p.mu.Lock()
		p.groups, p.at = groups, time.Now()
		p.mu.Unlock()
	}
	return groups.Has(group), nil
}
