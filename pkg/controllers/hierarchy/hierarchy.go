// Package hierarchy runs the controllers of Organizations, Folders and Projects:
//
//   - an Organization gets its namespace organization-{name}, then Ready; when
//     deleted, its folders and projects go first, then its namespace, then it;
//   - a Folder is Ready once admission has placed it; when deleted, its child
//     folders and projects go first;
//   - an Organization's creator becomes its owner through an
//     OrganizationMembership, and each role of a membership becomes a
//     PolicyBinding on the Organization;
//   - a Project's control plane is bootstrapped — its `default` namespace is
//     created inside the project — then the Project is Ready; when deleted,
//     every object in it is deleted through its API, then the server purges its
//     keys (Purger, which runs inside the API server because it needs etcd).
//
// Each kind has one shared informer and one work queue; a project is reached
// through a client scoped to it over one shared HTTP transport. Nothing is
// allocated per project beyond a queue entry while it is being worked on.
package hierarchy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"

	iamv1alpha1 "go.miloapis.com/milo/pkg/apis/iam/v1alpha1"
	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/client"
	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/events"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/projectbootstrap"
	"go.miloapis.com/milo/pkg/tenancy"
)

var (
	organizations = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("organizations")
	folders       = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("folders")
	projects      = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("projects")
)

// Controllers makes hierarchy objects ready and deletes them completely.
type Controllers struct {
	// What projects and the platform serve, for deletions.
	projectResources, platformResources allprojects.ResourceLists

	config   *rest.Config
	http     *http.Client
	dynamic  dynamic.Interface
	platform kubernetes.Interface
	workers  int
	events   *events.Recorder

	orgs, folders, projects, roles, memberships, bindings, protected cache.SharedIndexInformer

	// StoredByResource, if set, counts a project's objects of each of
	// resources in storage, so that a deletion lists only the resources that
	// hold some (set by the API server the controllers run in; nil
	// elsewhere). Resources it cannot count are left out of its answer;
	// revision is one the counts hold at (0: unknown).
	StoredByResource func(ctx context.Context, projectID string, resources []schema.GroupResource) (counts map[schema.GroupResource]int64, revision int64, err error)
	// Purge, if set, removes every key of a deleted project by its storage
	// id (set by the API server the controllers run in): an emptied project
	// is then purged and released in one write, instead of being released
	// to the server's Purger, which would write it again.
	Purge func(ctx context.Context, projectID string, since int64) error
	// OrganizationGone, if set, removes what the API server keeps in
	// storage for an organization whose contents are gone, before the
	// Organization is released.
	OrganizationGone func(ctx context.Context, org string) error
}

// New prepares the controllers over a client configuration of the platform and
// shared informers of the hierarchy (factory). The caller starts factory after New.
func New(config *rest.Config, factory dynamicinformer.DynamicSharedInformerFactory, workers int, recorder *events.Recorder) (*Controllers, error) {
	config = rest.CopyConfig(config)
	// The workers bound how much the controllers ask of the server at once; a
	// client-side rate limit (the loopback default is 50/s) would instead bound
	// how many projects can be created or deleted per second.
	config.QPS, config.Burst = -1, -1
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
	c := &Controllers{config: config, http: httpClient, dynamic: dyn, platform: platform, workers: workers, events: recorder,
		orgs:        factory.ForResource(organizations).Informer(),
		folders:     factory.ForResource(folders).Informer(),
		projects:    factory.ForResource(projects).Informer(),
		roles:       factory.ForResource(roles).Informer(),
		memberships: factory.ForResource(hierarchy.Memberships).Informer(),
		bindings:    factory.ForResource(policyBindings).Informer(),
		protected:   factory.ForResource(protectedResources).Informer(),
	}
	if err := hierarchy.AddIndexes(c.folders, c.projects); err != nil {
		return nil, err
	}
	if err := addRoleIndex(c.roles); err != nil {
		return nil, err
	}
	return c, nil
}

// projectConfig returns a client configuration of one project's control plane.
func (c *Controllers) projectConfig(name string) *rest.Config {
	return client.ProjectConfig(c.config, name)
}

// Run works until ctx ends, along with the Role controller (effective
// permissions) and the platform's cluster-role aggregation,
// and returns once every worker has stopped, so that
// an instance that loses leadership stops acting before another one starts.
func (c *Controllers) Run(ctx context.Context) {
	orgLoop := newLoop("organizations", c.orgs, c.syncOrganization)
	folderLoop := newLoop("folders", c.folders, c.syncFolder)
	projectLoop := newLoop("projects", c.projects, c.syncProject)
	projectLoop.idle = projectIdle
	roleLoop := newLoop("roles", c.roles, c.syncRole)
	membershipLoop := newLoop("organizationmemberships", c.memberships, c.syncMembership)
	// A membership puts back a binding of its own that someone changed or deleted.
	bindingChanged := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok {
			for _, ref := range u.GetOwnerReferences() {
				if ref.Kind == "OrganizationMembership" {
					membershipLoop.queue.Add(u.GetNamespace() + "/" + ref.Name)
				}
			}
		}
	}
	if reg, err := c.bindings.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, o any) { bindingChanged(o) },
		DeleteFunc: bindingChanged,
	}); err == nil {
		defer c.bindings.RemoveEventHandler(reg) //nolint:errcheck
	}
	// A role's effective permissions follow the roles it inherits, and its
	// Ready the registered kinds, which only the platform changes.
	if reg, err := c.roles.AddEventHandler(roleInheritors(roleLoop)); err == nil {
		defer c.roles.RemoveEventHandler(reg) //nolint:errcheck
	}
	if reg, err := c.protected.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { enqueueAll(roleLoop) },
		UpdateFunc: func(_, _ any) { enqueueAll(roleLoop) },
		DeleteFunc: func(any) { enqueueAll(roleLoop) },
	}); err == nil {
		defer c.protected.RemoveEventHandler(reg) //nolint:errcheck
	}

	// The deletion of a child may let its parent's deletion finish.
	parentDeleting := func(inf cache.SharedIndexInformer, key string) bool {
		obj, ok, _ := inf.GetStore().GetByKey(key)
		m := hierarchy.Object(obj)
		return ok && m != nil && m.GetDeletionTimestamp() != nil
	}
	childGone := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u := hierarchy.Object(obj)
		if u == nil {
			return
		}
		if org := u.GetLabels()[tenancy.OrganizationLabel]; org != "" && parentDeleting(c.orgs, org) {
			orgLoop.queue.Add(org)
		}
		if kind, name := hierarchy.ParentOf(obj); kind == "Folder" && parentDeleting(c.folders, name) {
			folderLoop.queue.Add(name)
		}
	}
	for _, inf := range []cache.SharedIndexInformer{c.folders, c.projects} {
		reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: childGone})
		if err == nil {
			defer inf.RemoveEventHandler(reg) //nolint:errcheck
		}
	}

	// The platform's aggregated ClusterRoles (admin, edit, view) get their rules
	// from this controller, as kube-controller-manager does for a cluster.
	roles := informers.NewSharedInformerFactory(c.platform, 0)
	aggregation := clusterroleaggregation.NewClusterRoleAggregation(roles.Rbac().V1().ClusterRoles(), c.platform.RbacV1())
	roles.Start(ctx.Done())
	defer roles.Shutdown()

	var wg sync.WaitGroup
	for _, l := range []*loop{orgLoop, folderLoop, projectLoop, roleLoop, membershipLoop} {
		l.events = c.events
		wg.Go(func() { l.run(ctx, c.workers) })
	}
	wg.Go(func() { aggregation.Run(ctx, 1) })
	wg.Wait()
}

func (c *Controllers) syncOrganization(ctx context.Context, org *unstructured.Unstructured) error {
	if org.GetDeletionTimestamp() != nil {
		return c.deleteOrganization(ctx, org)
	}
	if wrote, err := addFinalizers(ctx, c.dynamic, organizations, org, hierarchy.OrganizationFinalizer); wrote || err != nil {
		return err
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
	if !hierarchy.IsReady(org) {
		if err := c.makeCreatorOwner(ctx, org); err != nil {
			return err
		}
	}
	return c.setReady(ctx, organizations, org, "NamespaceReady", "namespace "+ns+" exists")
}

func (c *Controllers) syncFolder(ctx context.Context, f *unstructured.Unstructured) error {
	if f.GetDeletionTimestamp() != nil {
		return c.deleteFolder(ctx, f)
	}
	if wrote, err := addFinalizers(ctx, c.dynamic, folders, f, hierarchy.FolderFinalizer); wrote || err != nil {
		return err
	}
	return c.setReady(ctx, folders, f, "Placed", "in organization "+f.GetLabels()[tenancy.OrganizationLabel])
}

func (c *Controllers) syncProject(ctx context.Context, p *unstructured.Unstructured) error {
	if p.GetDeletionTimestamp() != nil {
		return c.deleteProject(ctx, p)
	}
	// Nothing is bootstrapped before the finalizers are in place, so that
	// nothing can outlive the Project.
	if wrote, err := addFinalizers(ctx, c.dynamic, projects, p, hierarchy.ProjectFinalizer, hierarchy.PurgeFinalizer); wrote || err != nil {
		return err
	}
	if projectIdle(p) {
		return nil
	}
	// Not Ready, or Ready from a bootstrap that made fewer namespaces (a project
	// created by an earlier Milo): bootstrap, which leaves what exists alone.
	client, err := kubernetes.NewForConfigAndClient(c.projectConfig(p.GetName()), c.http)
	if err != nil {
		return err
	}
	for _, ns := range projectbootstrap.Namespaces {
		_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("bootstrapping project %s: %w", p.GetName(), err)
		}
	}
	wrote, err := c.setConditionWrote(ctx, projects, p, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: projectbootstrap.ReadyReason, Message: projectbootstrap.ReadyMessage})
	if wrote {
		c.event(p, corev1.EventTypeNormal, projectbootstrap.ReadyReason, "Project %s is ready: %s", p.GetName(), projectbootstrap.ReadyMessage)
	}
	return err
}

// event records an Event about a hierarchy object where its organization's
// owners read (see package events); nothing without a recorder.
func (c *Controllers) event(obj *unstructured.Unstructured, eventtype, reason, format string, args ...any) {
	if c.events != nil {
		c.events.HierarchyEventf(keyOf(obj, "").organization, obj, eventtype, reason, format, args...)
	}
}

// projectIdle reports whether a Project has nothing for syncProject to do:
// it is not being deleted, has its finalizers, and is Ready from the
// current bootstrap.
func projectIdle(obj any) bool {
	m := hierarchy.Object(obj)
	return m != nil && m.GetDeletionTimestamp() == nil &&
		slices.Contains(m.GetFinalizers(), hierarchy.ProjectFinalizer) && slices.Contains(m.GetFinalizers(), hierarchy.PurgeFinalizer) &&
		hierarchy.IsReady(obj) && hierarchy.ReadyMessage(obj) == projectbootstrap.ReadyMessage
}

// setReady sets the Ready condition.
func (c *Controllers) setReady(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, reason, message string) error {
	if hierarchy.IsReady(obj) {
		return nil
	}
	wrote, err := c.setConditionWrote(ctx, gvr, obj, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: reason, Message: message})
	if wrote {
		c.event(obj, corev1.EventTypeNormal, reason, "%s %s is ready: %s", obj.GetKind(), obj.GetName(), message)
	}
	return err
}

var policyBindings = iamv1alpha1.SchemeGroupVersion.WithResource("policybindings")

func enqueueAll(l *loop) {
	for _, key := range l.informer.GetStore().ListKeys() {
		l.queue.Add(key)
	}
}
