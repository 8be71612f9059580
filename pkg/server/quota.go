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
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/controllers/allprojects"
	quotacontroller "go.miloapis.com/milo/pkg/controllers/quota"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/quota"
	"go.miloapis.com/milo/pkg/suspension"
	"go.miloapis.com/milo/pkg/tenancy"
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
// and the index hold what is stored.
func runQuota(ctx context.Context, loopback *rest.Config, tree *hierarchy.Tree, ledger *quota.Ledger, usage *quota.StorageMeter, index *suspension.Index) error {
	if ledger == nil || index == nil {
		return errors.New("the server was built without a quota ledger or a suspension index")
	}
	dyn, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return err
	}
	informer := func(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
		resync := time.Duration(0)
		if gvr == quotav1alpha1.ClaimsResource {
			// Every claim's object is looked up again at each resync (the
			// ledger asks on every update): a delete the server did not see
			// (a crash) frees its units then.
			resync = ClaimResync
		}
		inf := dynamicinformer.NewFilteredDynamicInformer(dyn, gvr, metav1.NamespaceAll, resync, cache.Indexers{}, nil).Informer()
		_ = inf.SetTransform(slimQuotaObject) // fails only once started
		return inf
	}
	inf := quotacontroller.Informers{
		Informers: quota.Informers{Registrations: informer(quotav1alpha1.RegistrationsResource), Grants: informer(quotav1alpha1.GrantsResource),
			Claims: informer(quotav1alpha1.ClaimsResource), ClaimPolicies: informer(quotav1alpha1.ClaimCreationPoliciesResource)},
		GrantPolicies: informer(quotav1alpha1.GrantCreationPoliciesResource), Suspensions: informer(projectSuspensionsResource),
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
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				index.Delete(u.GetName())
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

// slimQuotaObject drops what nobody here reads of a cached quota object:
// its managed fields, and a claim's per-request status (a claim and a grant
// are held once per object a quota charges or consumer it limits).
func slimQuotaObject(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	if u.GetKind() == "ResourceClaim" {
		unstructured.RemoveNestedField(u.Object, "status", "allocations")
	}
	return u, nil
}

func setSuspension(index *suspension.Index, obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	var s resourcemanagerv1alpha1.ProjectSuspension
	if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s) == nil {
		index.Set(&s)
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
