// Package quota runs the quota system's controller, inside the server
// process beside the admission plugin whose ledger it shares:
//
//   - AllowanceBuckets: one per consumer and resource type with a grant,
//     in the consumer's organization's namespace, its status the ledger's
//     numbers, written when they change (within a second);
//   - ResourceClaims: the object each is for is looked up when the claim
//     appears, when a delete of the object is admitted, and at every
//     resync; a claim whose object is gone (or was never stored) is
//     deleted, which frees its units;
//   - the Active condition of registrations and grants, the Ready
//     condition of policies, the phase of ProjectSuspensions;
//   - GrantCreationPolicies: each Organization or Project a policy matches
//     gets the grant the policy describes, when either appears.
//
// Every queue and informer is one for the whole platform; nothing is kept
// per project.
package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/manager"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/quota"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Grace is how long a claim whose object has never been seen is kept: the
// create it was made for may still be on its way to storage.
const Grace = time.Minute

// BucketDelay is how long a bucket's change waits for others before its
// status is written.
const BucketDelay = 250 * time.Millisecond

// Informers are what the controller watches beside the ledger's.
type Informers struct {
	quota.Informers
	GrantPolicies, Suspensions cache.SharedIndexInformer
	// Organizations and Projects: the hierarchy's shared informers.
	Organizations, Projects cache.SharedIndexInformer
}

// Controller keeps the quota objects' status and the claims honest.
type Controller struct {
	ledger    *quota.Ledger
	clients   *allprojects.Clients
	platform  dynamic.Interface
	hierarchy tenancy.HierarchyLookup
	inf       Informers
	mapper    *restmapper.DeferredDiscoveryRESTMapper
	queue     workqueue.TypedRateLimitingInterface[string]
	now       func() time.Time
	// Usage, if set, reads what a project stores before its objects or
	// bytes bucket is written (it is read lazily, at the first write).
	Usage *quota.StorageMeter

	seenMu sync.Mutex
	seen   map[string]bool // claims whose object has been seen stored
	// goingChecks counts, per claim whose object a delete was admitted
	// for, the lookups that found it still there.
	goingChecks map[string]int
}

// going queues the claim of an object a delete was admitted for: one item
// per claim, however many deletes were.
func (c *Controller) going(claim string) {
	c.seenMu.Lock()
	if _, ok := c.goingChecks[claim]; !ok {
		c.goingChecks[claim] = 0
	}
	c.seenMu.Unlock()
	c.queue.Add("going\x00" + claim)
}

// New returns the controller.
func New(ledger *quota.Ledger, clients *allprojects.Clients, tree tenancy.HierarchyLookup, inf Informers) (*Controller, error) {
	platform, err := dynamic.NewForConfigAndClient(clients.Config(""), clients.HTTPClient())
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfigAndClient(clients.Config(""), clients.HTTPClient())
	if err != nil {
		return nil, err
	}
	c := &Controller{ledger: ledger, clients: clients, platform: platform, hierarchy: tree, inf: inf, now: time.Now, seen: map[string]bool{}, goingChecks: map[string]int{},
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}
	c.queue = manager.NewFairQueue("quota", c.organizationOf, workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second)))
	// A bucket's status is written at most every BucketDelay: a burst of
	// claims is one write.
	ledger.Notify(func(k quota.BucketKey) { c.queue.AddAfter(bucketItem(k), BucketDelay) },
		func(claim string) { c.queue.Add("claim\x00" + claim) },
		c.going)
	// A claim stored in its object's own transaction: its object was
	// stored, nothing to look up.
	ledger.NotifySeen(c.markSeen)
	on := func(inf cache.SharedIndexInformer, prefix string, namespaced, updates bool) error {
		h := cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { c.enqueue(prefix, obj, namespaced) }}
		if updates {
			h.UpdateFunc = func(_, obj any) { c.enqueue(prefix, obj, namespaced) }
		}
		_, err := inf.AddEventHandler(h)
		return err
	}
	for _, h := range []struct {
		inf                 cache.SharedIndexInformer
		prefix              string
		namespaced, updates bool
	}{
		{inf.Registrations, "registration", false, true}, {inf.Grants, "grant", true, true}, {inf.ClaimPolicies, "claimpolicy", false, true},
		{inf.GrantPolicies, "grantpolicy", false, true}, {inf.Suspensions, "suspension", false, true},
		// Grant policies read a consumer when it is created (and when a
		// policy changes), not on its updates: a tenant relabelling its
		// project does not collect grants.
		{inf.Organizations, "consumer\x00" + quota.KindOrganization, false, false}, {inf.Projects, "consumer\x00" + quota.KindProject, false, false},
	} {
		if err := on(h.inf, h.prefix, h.namespaced, h.updates); err != nil {
			return nil, err
		}
	}
	// A project being deleted takes its grants, buckets and suspensions
	// with it, before its name can be used again, and its objects' claims
	// are checked.
	if _, err := inf.Projects.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if u := hierarchy.Object(obj); u != nil && u.GetDeletionTimestamp() != nil {
				c.queue.Add("projectgone\x00" + u.GetName() + "\x00" + u.GetLabels()[tenancy.OrganizationLabel] + "\x00" + string(u.GetUID()))
			}
		},
		DeleteFunc: func(obj any) {
			if u := hierarchy.Object(obj); u != nil {
				c.queue.Add("projectgone\x00" + u.GetName() + "\x00" + u.GetLabels()[tenancy.OrganizationLabel] + "\x00" + string(u.GetUID()))
				ledger.ProjectDeleted(u.GetName())
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := inf.Claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if ns, name, ok := quota.DeletedName(obj); ok {
				c.forget(quota.Key(ns, name))
			}
		},
	}); err != nil {
		return nil, err
	}
	// A changed registration changes which grants count.
	if _, err := inf.Registrations.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.requeueAll(inf.Grants, "grant", true) }, UpdateFunc: func(any, any) { c.requeueAll(inf.Grants, "grant", true) },
		DeleteFunc: func(any) { c.requeueAll(inf.Grants, "grant", true) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// organizationOf is the organization a work item is about, so that the
// queue serves organizations in turn: a grant to ten thousand projects of
// one organization delays another organization's work by one item per
// organization with work waiting. Items of no organization, or whose
// object the informers no longer hold, take the platform's turn ("").
// It reads only the informers' stores: the queue calls it under its lock.
func (c *Controller) organizationOf(item string) string {
	kind, rest, _ := strings.Cut(item, "\x00")
	first, rest, _ := strings.Cut(rest, "\x00")
	switch kind {
	case "bucket", "recount", "consumer": // consumer kind, consumer name
		name, _, _ := strings.Cut(rest, "\x00")
		switch first {
		case quota.KindOrganization:
			return name
		case quota.KindProject:
			return labelledOrganization(c.inf.Projects, name)
		}
		return ""
	case "projectgone": // project, organization, uid
		org, _, _ := strings.Cut(rest, "\x00")
		return org
	case "suspension":
		return labelledOrganization(c.inf.Suspensions, first)
	}
	// "namespace/name" of a grant or claim: an organization's namespace.
	if ns, _, ok := strings.Cut(first, "/"); ok {
		if org, ok := tenancy.OrganizationOfNamespace(ns); ok {
			return org
		}
	}
	return ""
}

// labelledOrganization is the organization label of the object named name
// in inf's store ("" if it holds none).
func labelledOrganization(inf cache.SharedIndexInformer, name string) string {
	if inf == nil {
		return ""
	}
	obj, exists, err := inf.GetStore().GetByKey(name)
	if err != nil || !exists {
		return ""
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		// Read in place: GetLabels copies the map, and the queue asks under its lock.
		org, _, _ := unstructured.NestedString(u.Object, "metadata", "labels", tenancy.OrganizationLabel)
		return org
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetLabels()[tenancy.OrganizationLabel]
}

func bucketItem(k quota.BucketKey) string {
	return "bucket\x00" + k.Consumer.Kind + "\x00" + k.Consumer.Name + "\x00" + k.ResourceType
}

func (c *Controller) enqueue(prefix string, obj any, namespaced bool) {
	// Organizations and Projects are Go types in the hierarchy's informers.
	u := hierarchy.Object(obj)
	if u == nil {
		return
	}
	key := u.GetName()
	if namespaced {
		key = quota.Key(u.GetNamespace(), u.GetName())
	}
	c.queue.Add(prefix + "\x00" + key)
}

func (c *Controller) requeueAll(inf cache.SharedIndexInformer, prefix string, namespaced bool) {
	for _, obj := range inf.GetStore().List() {
		c.enqueue(prefix, obj, namespaced)
	}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown()
	for _, k := range c.ledger.Buckets() {
		c.queue.Add(bucketItem(k))
	}
	for range workers {
		go wait.UntilWithContext(ctx, c.work, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) work(ctx context.Context) {
	for {
		item, quit := c.queue.Get()
		if quit {
			return
		}
		after, err := c.sync(ctx, item)
		switch {
		case err != nil:
			klog.FromContext(ctx).V(2).Info("Quota work failed; retrying", "item", strings.ReplaceAll(item, "\x00", " "), "err", err)
			c.queue.AddRateLimited(item)
		case after > 0:
			c.queue.AddAfter(item, after)
		default:
			c.queue.Forget(item)
		}
		c.queue.Done(item)
	}
}

func (c *Controller) sync(ctx context.Context, item string) (time.Duration, error) {
	parts := strings.Split(item, "\x00")
	switch parts[0] {
	case "recount":
		return 0, c.recount(ctx, quota.BucketKey{Consumer: quota.Consumer{Kind: parts[1], Name: parts[2]}, ResourceType: parts[3]})
	case "bucket":
		return 0, c.syncBucket(ctx, quota.BucketKey{Consumer: quota.Consumer{Kind: parts[1], Name: parts[2]}, ResourceType: parts[3]})
	case "claim":
		return c.syncClaim(ctx, parts[1], false)
	case "going":
		return c.syncClaim(ctx, parts[1], true)
	case "projectgone":
		return 0, c.projectGone(ctx, parts[1], parts[2], parts[3])
	case "grant":
		return 0, c.syncGrant(ctx, parts[1])
	case "registration":
		return 0, c.syncRegistration(ctx, parts[1])
	case "claimpolicy":
		return 0, c.syncClaimPolicy(ctx, parts[1])
	case "grantpolicy":
		return 0, c.syncGrantPolicy(ctx, parts[1])
	case "suspension":
		return 0, c.syncSuspension(ctx, parts[1])
	case "consumer":
		return 0, c.syncConsumer(ctx, parts[1], parts[2])
	}
	return 0, nil
}

func (c *Controller) syncBucket(ctx context.Context, k quota.BucketKey) error {
	if quota.StorageMetered(k.ResourceType) && k.Consumer.Kind == quota.KindProject {
		if err := c.Usage.Ensure(ctx, k.Consumer.Name); err != nil {
			return err
		}
	}
	s := c.ledger.Bucket(k)
	org, err := quota.OrganizationOf(ctx, c.hierarchy, k.Consumer)
	if err != nil {
		return nil // the consumer is gone; its organization's namespace goes with it
	}
	ns, name := tenancy.OrganizationNamespace(org), quota.BucketName(k)
	client := c.platform.Resource(quotav1alpha1.BucketsResource).Namespace(ns)
	u, err := client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if !s.Exists {
			return nil
		}
		b := &quotav1alpha1.AllowanceBucket{
			TypeMeta: metav1.TypeMeta{APIVersion: quotav1alpha1.SchemeGroupVersion.String(), Kind: "AllowanceBucket"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
				quotav1alpha1.ConsumerKindLabel: k.Consumer.Kind, quotav1alpha1.ConsumerNameLabel: quota.LabelValue(k.Consumer.Name)}},
			Spec: quotav1alpha1.AllowanceBucketSpec{ConsumerRef: k.Consumer.Ref(), ResourceType: k.ResourceType},
		}
		if u, err = create(ctx, client, b); err != nil {
			return err
		}
		c.queue.Add("recount" + strings.TrimPrefix(bucketItem(k), "bucket"))
	} else if err != nil {
		return err
	}
	var b quotav1alpha1.AllowanceBucket
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b); err != nil {
		return err
	}
	want := quotav1alpha1.AllowanceBucketStatus{ObservedGeneration: b.Generation, Limit: s.Limit, Allocated: s.Allocated, Available: s.Available,
		ClaimCount: s.ClaimCount, GrantCount: s.GrantCount, ContributingGrantRefs: s.Grants}
	got := b.Status
	got.LastReconciliation = nil
	if equality.Semantic.DeepEqual(got, want) {
		return nil
	}
	now := metav1.NewTime(c.now())
	want.LastReconciliation = &now
	b.Status = want
	return updateStatus(ctx, client, &b)
}

// maxGoingChecks bounds how often the object of a claim is looked up after
// a delete of it was admitted and it is still there, not being deleted:
// the delete may have been refused after admission.
const maxGoingChecks = 12

// backoff returns when to look the object of claim key up again: 50 ms,
// doubling, at most a minute apart.
func (c *Controller) backoff(key string) time.Duration {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	n := c.goingChecks[key]
	c.goingChecks[key] = n + 1
	return min(50*time.Millisecond<<min(n, 20), time.Minute)
}

func (c *Controller) checksOf(key string) int {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	return c.goingChecks[key]
}

func (c *Controller) doneGoing(key string) {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	delete(c.goingChecks, key)
}

// syncClaim checks the object of the claim at key; going: a delete of the
// object was admitted.
func (c *Controller) syncClaim(ctx context.Context, key string, going bool) (time.Duration, error) {
	obj, exists, err := c.inf.Claims.GetStore().GetByKey(key)
	if err != nil || !exists {
		c.forget(key)
		return 0, err
	}
	claim, ok := quota.As[quotav1alpha1.ResourceClaim](obj)
	if !ok || claim.DeletionTimestamp != nil {
		return 0, nil
	}
	trigger, ok := quota.TriggerFromAnnotations(claim)
	if !ok {
		return 0, nil // made by hand at the platform: counted as it is
	}
	cfg := c.clients.Config(trigger.Project)
	client, err := dynamic.NewForConfigAndClient(cfg, c.clients.HTTPClient())
	if err != nil {
		return 0, err
	}
	ri := client.Resource(trigger.GroupVersionResource())
	var got *unstructured.Unstructured
	if trigger.Namespace != "" {
		got, err = ri.Namespace(trigger.Namespace).Get(ctx, trigger.Name, metav1.GetOptions{})
	} else {
		got, err = ri.Get(ctx, trigger.Name, metav1.GetOptions{})
	}
	// A 404 about the object, not about its path (a kind not served, yet or
	// any more): only that says the object is gone.
	if apierrors.IsNotFound(err) && !objectGone(err, trigger) {
		return 0, fmt.Errorf("looking up %s %s: %w", trigger.Kind, trigger.Name, err)
	}
	switch {
	case err == nil && string(got.GetUID()) == trigger.UID:
		c.markSeen(key)
		if got.GetDeletionTimestamp() != nil {
			// Going: its finalizers decide when. Looked up again, less
			// and less often (a finalizer may stay for ever).
			return c.backoff(key), nil
		}
		if going {
			// Still there: the delete has not been applied yet, or was
			// refused; looked up a few more times.
			if after := c.backoff(key); c.checksOf(key) <= maxGoingChecks {
				return after, nil
			}
			c.doneGoing(key)
		}
		return 0, nil
	case err != nil && !apierrors.IsNotFound(err):
		return 0, err
	}
	// Gone, or another object of the same name.
	age := c.now().Sub(claim.CreationTimestamp.Time)
	// Never seen: its create may still be on its way (another object of
	// the name may be going first); after Grace it is taken as failed.
	if !c.wasSeen(key) && age < Grace {
		return min(Grace-age, time.Second), nil
	}
	uid := claim.UID
	err = c.platform.Resource(quotav1alpha1.ClaimsResource).Namespace(claim.Namespace).Delete(ctx, claim.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		err = nil
	}
	if err == nil {
		c.forget(key)
	}
	return 0, err
}

// objectGone reports whether a 404 says the object, or its project, is
// gone — not that its path is not served.
func objectGone(err error, trigger quota.TriggerRef) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	d := status.Status().Details
	return d.Name == trigger.Name || (trigger.Project != "" && d.Name == trigger.Project && d.Group == quota.ConsumerGroup && d.Kind == "projects")
}

func (c *Controller) markSeen(key string) {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	c.seen[key] = true
}

func (c *Controller) wasSeen(key string) bool {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	return c.seen[key]
}

func (c *Controller) forget(key string) {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	delete(c.seen, key)
	delete(c.goingChecks, key)
}

// condition sets one condition on the status of the object at key in inf.
func (c *Controller) condition(ctx context.Context, inf cache.SharedIndexInformer, gvr schema.GroupVersionResource, key, condType, reason string, err error) error {
	obj, exists, gerr := inf.GetStore().GetByKey(key)
	if gerr != nil || !exists {
		return gerr
	}
	u, cerr := asUnstructured(obj, gvr.GroupVersion())
	if cerr != nil {
		return cerr
	}
	var status struct {
		ObservedGeneration int64              `json:"observedGeneration,omitempty"`
		Conditions         []metav1.Condition `json:"conditions,omitempty"`
	}
	if raw, ok := u.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status)
	}
	cond := metav1.Condition{Type: condType, Status: metav1.ConditionTrue, Reason: reason, Message: "in effect", ObservedGeneration: u.GetGeneration()}
	if err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, quotav1alpha1.ReasonValidationFailed, err.Error()
	}
	if old := meta.FindStatusCondition(status.Conditions, condType); old != nil && old.Status == cond.Status && old.Reason == cond.Reason &&
		old.Message == cond.Message && status.ObservedGeneration == u.GetGeneration() {
		return nil
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	status.ObservedGeneration = u.GetGeneration()
	raw, cerr := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if cerr != nil {
		return cerr
	}
	u.Object["status"] = raw
	ri := c.platform.Resource(gvr)
	if u.GetNamespace() != "" {
		_, cerr = ri.Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	} else {
		_, cerr = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	}
	if apierrors.IsNotFound(cerr) {
		return nil
	}
	return cerr
}

// The ledger is fed by handlers of the same informers as the controller's,
// in no set order: an object it has not seen yet is retried.

func (c *Controller) syncGrant(ctx context.Context, key string) error {
	if _, exists, err := c.inf.Grants.GetStore().GetByKey(key); err != nil || !exists {
		return err
	}
	ns, name, _ := strings.Cut(key, "/")
	err := c.ledger.GrantError(ns, name)
	if errors.Is(err, quota.ErrNotLoaded) {
		return err
	}
	return c.condition(ctx, c.inf.Grants, quotav1alpha1.GrantsResource, key, quotav1alpha1.ConditionActive, quotav1alpha1.ReasonGrantActive, err)
}

func (c *Controller) syncRegistration(ctx context.Context, name string) error {
	if _, exists, err := c.inf.Registrations.GetStore().GetByKey(name); err != nil || !exists {
		return err
	}
	err := c.ledger.RegistrationError(name)
	if errors.Is(err, quota.ErrNotLoaded) {
		return err
	}
	return c.condition(ctx, c.inf.Registrations, quotav1alpha1.RegistrationsResource, name, quotav1alpha1.ConditionActive, quotav1alpha1.ReasonRegistrationActive, err)
}

func (c *Controller) syncClaimPolicy(ctx context.Context, name string) error {
	obj, exists, err := c.inf.ClaimPolicies.GetStore().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	policy, ok := quota.As[quotav1alpha1.ClaimCreationPolicy](obj)
	if !ok {
		return nil
	}
	p := quota.CompileClaimPolicy(policy)
	reason := quotav1alpha1.ReasonPolicyReady
	if p.Disabled {
		reason = quotav1alpha1.ReasonPolicyDisabled
	}
	return c.condition(ctx, c.inf.ClaimPolicies, quotav1alpha1.ClaimCreationPoliciesResource, name, quotav1alpha1.ConditionReady, reason, p.Err)
}

func (c *Controller) grantPolicy(name string) (*quota.GrantPolicy, bool) {
	obj, exists, err := c.inf.GrantPolicies.GetStore().GetByKey(name)
	if err != nil || !exists {
		return nil, false
	}
	p, ok := quota.As[quotav1alpha1.GrantCreationPolicy](obj)
	if !ok {
		return nil, false
	}
	return quota.CompileGrantPolicy(p), true
}

func (c *Controller) syncGrantPolicy(ctx context.Context, name string) error {
	p, ok := c.grantPolicy(name)
	if !ok {
		return nil
	}
	reason := quotav1alpha1.ReasonPolicyReady
	if p.Disabled {
		reason = quotav1alpha1.ReasonPolicyDisabled
	}
	if err := c.condition(ctx, c.inf.GrantPolicies, quotav1alpha1.GrantCreationPoliciesResource, name, quotav1alpha1.ConditionReady, reason, p.Err); err != nil {
		return err
	}
	if !p.Active() {
		return nil
	}
	// Every existing consumer of the trigger's kind gets its grant too.
	inf, prefix := c.inf.Organizations, "consumer\x00"+quota.KindOrganization
	if p.Trigger.Kind == quota.KindProject {
		inf, prefix = c.inf.Projects, "consumer\x00"+quota.KindProject
	}
	c.requeueAll(inf, prefix, false)
	return nil
}

// syncConsumer gives an Organization or Project the grants of the policies that match it.
func (c *Controller) syncConsumer(ctx context.Context, kind, name string) error {
	inf := c.inf.Organizations
	if kind == quota.KindProject {
		inf = c.inf.Projects
	}
	obj, exists, err := inf.GetStore().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	if m := hierarchy.Object(obj); m == nil || m.GetDeletionTimestamp() != nil {
		return nil
	}
	self := quota.Consumer{Kind: kind, Name: name}
	// The policies' expressions read the consumer as an unstructured
	// object, made only once a policy is for its kind: every consumer is
	// synced when the server starts and when it is created, and most
	// platforms have no policy for most of them.
	var u *unstructured.Unstructured
	for _, pobj := range c.inf.GrantPolicies.GetStore().List() {
		m := hierarchy.Object(pobj)
		if m == nil {
			continue
		}
		p, ok := c.grantPolicy(m.GetName())
		if !ok || !p.Active() || p.Trigger.Kind != kind {
			continue
		}
		if u == nil {
			if u, err = hierarchy.AsUnstructured(obj); err != nil {
				return err
			}
		}
		planned, ok, err := p.Plan(u.Object, self)
		if err != nil {
			klog.FromContext(ctx).Info("A grant policy cannot be applied", "policy", p.Name, "consumer", self, "err", err)
			continue
		}
		if !ok {
			continue
		}
		org, err := quota.OrganizationOf(ctx, c.hierarchy, planned.Consumer)
		if err != nil {
			continue
		}
		g := &quotav1alpha1.ResourceGrant{
			TypeMeta:   metav1.TypeMeta{APIVersion: quotav1alpha1.SchemeGroupVersion.String(), Kind: "ResourceGrant"},
			ObjectMeta: metav1.ObjectMeta{Namespace: tenancy.OrganizationNamespace(org), Name: planned.Name, Labels: planned.Labels},
			Spec:       quotav1alpha1.ResourceGrantSpec{ConsumerRef: planned.Consumer.Ref(), Allowances: planned.Allowances},
		}
		if _, err := create(ctx, c.platform.Resource(quotav1alpha1.GrantsResource).Namespace(g.Namespace), g); err != nil && !apierrors.IsAlreadyExists(err) {
			return err // the organization's namespace may not exist yet: retried
		}
	}
	return nil
}

// projectGone deletes what was the project's own: its grants and buckets
// (in its organization's namespace) and its suspensions, so that a later
// project of the same name starts without them.
func (c *Controller) projectGone(ctx context.Context, project, org, uid string) error {
	// A later project of the name keeps what is its own.
	if obj, exists, err := c.inf.Projects.GetStore().GetByKey(project); err != nil {
		return err
	} else if exists {
		if u := hierarchy.Object(obj); u != nil && string(u.GetUID()) != uid {
			return nil
		}
	}
	if org != "" {
		ns := tenancy.OrganizationNamespace(org)
		if err := c.platform.Resource(quotav1alpha1.GrantsResource).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
			FieldSelector: "spec.consumerRef.kind=" + quota.KindProject + ",spec.consumerRef.name=" + project}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err := c.platform.Resource(quotav1alpha1.BucketsResource).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
			LabelSelector: quotav1alpha1.ConsumerKindLabel + "=" + quota.KindProject + "," + quotav1alpha1.ConsumerNameLabel + "=" + quota.LabelValue(project)}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	for _, obj := range c.inf.Suspensions.GetStore().List() {
		s, ok := quota.As[resourcemanagerv1alpha1.ProjectSuspension](obj)
		if !ok || s.Spec.ProjectRef.Name != project {
			continue
		}
		err := c.platform.Resource(resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("projectsuspensions")).Delete(ctx, s.Name,
			metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(s.UID))})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

func (c *Controller) syncSuspension(ctx context.Context, name string) error {
	obj, exists, err := c.inf.Suspensions.GetStore().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	s, ok := quota.As[resourcemanagerv1alpha1.ProjectSuspension](obj)
	if !ok || s.Status.Phase != "" {
		return nil
	}
	s = s.DeepCopy() // the informer's own
	// A typed client's decoding clears the kind, which a write needs.
	s.APIVersion, s.Kind = resourcemanagerv1alpha1.SchemeGroupVersion.String(), "ProjectSuspension"
	s.Status.Phase = resourcemanagerv1alpha1.SuspensionActive
	return updateStatus(ctx, c.platform.Resource(resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("projectsuspensions")), s)
}

// asUnstructured is a copy of obj, an object an informer holds (its Go type,
// or unstructured), to be changed and written back as gv's.
func asUnstructured(obj any, gv schema.GroupVersion) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.DeepCopy(), nil
	}
	o, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("not an object: %T", obj)
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: raw}
	// A typed client's decoding clears the kind, which a write needs.
	u.SetAPIVersion(gv.String())
	u.SetKind(hierarchy.KindOf(obj))
	return u, nil
}

func create(ctx context.Context, ri dynamic.ResourceInterface, obj runtime.Object) (*unstructured.Unstructured, error) {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return ri.Create(ctx, &unstructured.Unstructured{Object: raw}, metav1.CreateOptions{})
}

func updateStatus(ctx context.Context, ri dynamic.ResourceInterface, obj runtime.Object) error {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	_, err = ri.UpdateStatus(ctx, &unstructured.Unstructured{Object: raw}, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
