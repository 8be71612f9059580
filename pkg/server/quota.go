package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/controllers/allprojects"
	quotacontroller "go.miloapis.com/milo/pkg/controllers/quota"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/quota"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/suspension"
	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/typedinformer"
)

// ClaimResync is how often every quota claim's object is looked up again.
const ClaimResync = time.Hour

var (
	projectSuspensionsResource = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("projectsuspensions")
	organizationsGVR           = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("organizations")
	projectsGVR                = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("projects")
)

// runQuota feeds the quota ledger and the suspension index from the
// platform's objects, bootstraps the built-in registrations and policies,
// and runs the quota controller (its queues share the ledger with
// admission, so it runs in the server process). It returns once the ledger
// and the index hold what is stored. storage holds the quota kinds'
// storage in this process: the grants and claims are read from it.
func runQuota(ctx context.Context, loopback *rest.Config, storage map[string]typedinformer.Storage, tree *hierarchy.Tree, ledger *quota.Ledger, usage *quota.StorageMeter, index *suspension.Index, joints *tenantstorage.Joints) error {
	if ledger == nil || index == nil {
		return errors.New("the server was built without a quota ledger or a suspension index")
	}
	if joints != nil {
		// Tallies that hold more than the claims seen are counted again.
		go quota.NewRecounter(ledger, func(ctx context.Context, namespace, key string) (bool, error) {
			return joints.Recount(ctx, quotav1alpha1.ClaimsResource.GroupResource(), namespace, key)
		}).Run(ctx)
	}
	// One watch of every project's object count in storage, so the
	// buckets count what other replicas store.
	go usage.FollowCounts(ctx)
	dyn, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return err
	}
	// The quota kinds and suspensions are held as their Go types: a claim
	// is held per charged object and a grant per consumer, and the ledger
	// reads each as its struct.
	quotaClient, err := typedinformer.NewClient(loopback, quotav1alpha1.SchemeGroupVersion, quotav1alpha1.AddToScheme)
	if err != nil {
		return err
	}
	suspensionClient, err := typedinformer.NewClient(loopback, resourcemanagerv1alpha1.SchemeGroupVersion, resourcemanagerv1alpha1.AddToScheme)
	if err != nil {
		return err
	}
	informer := func(gvr schema.GroupVersionResource, example runtime.Object) cache.SharedIndexInformer {
		client, resync := quotaClient, time.Duration(0)
		if gvr.Group != quotav1alpha1.GroupName {
			client = suspensionClient
		}
		if gvr == quotav1alpha1.ClaimsResource {
			// Every claim's object is looked up again at each resync (the
			// ledger asks on every update): a delete the server did not see
			// (a crash) frees its units then.
			resync = ClaimResync
		}
		if s := storage[gvr.Resource]; s != nil && uncachedResources.Has(gvr.GroupResource()) {
			// Read in-process: a claim is stored with every charged
			// object, and over the loopback each was encoded by the
			// server and decoded again here. Only storage without a watch
			// cache hands out objects the informer may change.
			return typedinformer.NewFromStorage(s, example, resync, cache.Indexers{}, slimQuotaObject)
		}
		return typedinformer.New(client, gvr.Resource, example, resync, cache.Indexers{}, slimQuotaObject)
	}
	inf := quotacontroller.Informers{
		Informers: quota.Informers{
			Registrations: informer(quotav1alpha1.RegistrationsResource, &quotav1alpha1.ResourceRegistration{}),
			Grants:        informer(quotav1alpha1.GrantsResource, &quotav1alpha1.ResourceGrant{}),
			Claims:        informer(quotav1alpha1.ClaimsResource, &quotav1alpha1.ResourceClaim{}),
			ClaimPolicies: informer(quotav1alpha1.ClaimCreationPoliciesResource, &quotav1alpha1.ClaimCreationPolicy{}),
		},
		GrantPolicies: informer(quotav1alpha1.GrantCreationPoliciesResource, &quotav1alpha1.GrantCreationPolicy{}),
		Suspensions:   informer(projectSuspensionsResource, &resourcemanagerv1alpha1.ProjectSuspension{}),
		Organizations: tree.Factory().ForResource(organizationsGVR).Informer(), Projects: tree.Factory().ForResource(projectsGVR).Informer(),
	}
	fed, err := quota.Feed(ledger, inf.Informers)
	if err != nil {
		return err
	}
	indexed, err := inf.Suspensions.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { setSuspension(index, obj) },
		UpdateFunc: func(_, obj any) { setSuspension(index, obj) },
		DeleteFunc: func(obj any) {
			if _, name, ok := quota.DeletedName(obj); ok {
				index.Delete(name)
			}
		},
	})
	if err != nil {
		return err
	}
	// Projects per organization is metered: counted from the hierarchy's
	// cache of Projects, every project of the organization, with no claim.
	ledger.Meter(quota.ProjectsPerOrganization)
	count := func(obj any, delta int64, added bool) {
		u := hierarchy.Object(obj)
		if u == nil || u.GetLabels()[tenancy.OrganizationLabel] == "" {
			return
		}
		object := ""
		if added {
			object = quota.TriggerRef{Group: quota.ConsumerGroup, Resource: "projects", Name: u.GetName(), UID: string(u.GetUID())}.ObjectKey()
		}
		ledger.MeterAdd(quota.ProjectsPerOrganization, quota.Consumer{Kind: quota.KindOrganization, Name: u.GetLabels()[tenancy.OrganizationLabel]}, delta, object)
	}
	counted, err := inf.Projects.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { count(obj, 1, true) },
		UpdateFunc: func(old, obj any) {
			o, n := hierarchy.Object(old), hierarchy.Object(obj)
			// Another organization, or another project of the name (seen as
			// an update when a relist missed the delete): one out, one in.
			if o != nil && n != nil && (o.GetUID() != n.GetUID() || o.GetLabels()[tenancy.OrganizationLabel] != n.GetLabels()[tenancy.OrganizationLabel]) {
				count(o, -1, false)
				count(n, 1, o.GetUID() != n.GetUID())
			}
		},
		DeleteFunc: func(obj any) {
			count(obj, -1, false)
			if u := hierarchy.Object(obj); u != nil {
				usage.ProjectGone(u.GetName(), tenancy.StorageIDOf(u))
			}
		},
	})
	if err != nil {
		return err
	}
	// What the server knows of a deleted organization's count of
	// Projects in storage is dropped with it.
	if _, err := inf.Organizations.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if _, name, ok := quota.DeletedName(obj); ok {
				ledger.ForgetOrganization(name)
			}
		},
	}); err != nil {
		return err
	}
	clients, err := allprojects.NewClients(loopback)
	if err != nil {
		return err
	}
	ctl, err := quotacontroller.New(ledger, clients, tree, inf)
	if err != nil {
		return err
	}
	ctl.Usage = usage
	own := []cache.SharedIndexInformer{inf.Registrations, inf.Grants, inf.Claims, inf.ClaimPolicies, inf.GrantPolicies, inf.Suspensions}
	for _, i := range own {
		go i.RunWithContext(ctx)
	}
	// The handlers, not only the informers: the ledger and the index hold
	// what is stored once their handlers have seen the first lists.
	synced := append(fed, indexed.HasSynced, counted.HasSynced)
	for _, i := range append(own, inf.Organizations, inf.Projects) {
		synced = append(synced, i.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("the quota informers did not sync")
	}
	ledger.MarkSynced()
	index.MarkSynced()
	if err := bootstrapQuota(ctx, dyn); err != nil {
		return fmt.Errorf("bootstrapping quota registrations: %w", err)
	}
	go ctl.Run(ctx, 4)
	return nil
}

// slimQuotaObject drops what nobody here reads of a cached claim, beyond
// the managed fields every cached object loses: its per-request status (a
// claim is held once per object a quota charges).
func slimQuotaObject(obj runtime.Object) {
	if c, ok := obj.(*quotav1alpha1.ResourceClaim); ok {
		c.Status.Allocations = nil
	}
}

func setSuspension(index *suspension.Index, obj any) {
	if s, ok := quota.As[resourcemanagerv1alpha1.ProjectSuspension](obj); ok {
		index.Set(s)
	}
}

// bootstrapQuota creates the built-in registrations and their claim
// policies where missing; a provider's changes to them are kept. They
// charge nothing until a grant names their resource type.
func bootstrapQuota(ctx context.Context, dyn dynamic.Interface) error {
	regs, policies := quota.BuiltIns()
	for _, r := range regs {
		if err := createIfMissing(ctx, dyn.Resource(quotav1alpha1.RegistrationsResource), &r); err != nil {
			return err
		}
	}
	for _, p := range policies {
		if err := createIfMissing(ctx, dyn.Resource(quotav1alpha1.ClaimCreationPoliciesResource), &p); err != nil {
			return err
		}
	}
	return nil
}

func createIfMissing(ctx context.Context, ri dynamic.ResourceInterface, obj runtime.Object) error {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	if _, err := ri.Create(ctx, &unstructured.Unstructured{Object: raw}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
