package quota

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/quota"
	"go.miloapis.com/milo/pkg/tenancy"
)

// recount claims, when a consumer's bucket for a resource type is first
// created, for the objects it already holds that the claim policies of the
// type match: a grant limits what was there before it too. Claims are
// named after their objects, so a recount never claims an object twice,
// whatever admission claimed meanwhile; objects beyond the limit are
// claimed all the same (the bucket then has nothing available).
func (c *Controller) recount(ctx context.Context, k quota.BucketKey) error {
	if c.ledger.Metered(k.ResourceType) {
		return nil // counted whole already
	}
	org, err := quota.OrganizationOf(ctx, c.hierarchy, k.Consumer)
	if err != nil {
		return nil
	}
	for _, obj := range c.inf.ClaimPolicies.GetStore().List() {
		policy, ok := quota.As[quotav1alpha1.ClaimCreationPolicy](obj)
		if !ok {
			continue
		}
		p := quota.CompileClaimPolicy(policy)
		if !p.Active() || !p.Requests(k.ResourceType) {
			continue
		}
		err = c.recountPolicy(ctx, k, org, p, p.Trigger.WithVersion(p.TriggerVersion))
		if meta.IsNoMatchError(err) {
			// A kind the platform does not serve (a project's own): not recounted.
			klog.FromContext(ctx).Info("Not recounting a kind the platform does not serve", "policy", p.Name, "kind", p.Trigger.Kind)
			continue
		}
		if err != nil {
			return fmt.Errorf("recounting %s for %s: %w", k.ResourceType, k.Consumer, err)
		}
	}
	return nil
}

func (c *Controller) recountPolicy(ctx context.Context, k quota.BucketKey, org string, p *quota.ClaimPolicy, gvk schema.GroupVersionKind) error {
	// The Projects of an organization are in the hierarchy's informer.
	if gvk.GroupKind() == (schema.GroupKind{Group: quota.ConsumerGroup, Kind: quota.KindProject}) {
		for _, obj := range c.inf.Projects.GetStore().List() {
			m := hierarchy.Object(obj)
			if m == nil || m.GetLabels()[tenancy.OrganizationLabel] != org || m.GetDeletionTimestamp() != nil {
				continue
			}
			u, err := hierarchy.AsUnstructured(obj)
			if err != nil {
				return err
			}
			if err := c.claimExisting(ctx, k, org, p, "", gvk.GroupVersion().WithResource("projects"), u); err != nil {
				return err
			}
		}
		return nil
	}
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		c.mapper.Reset()
		mapping, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return err
	}
	// Where the consumer's objects are: the project, or every project of the organization.
	projects := []string{k.Consumer.Name}
	if k.Consumer.Kind == quota.KindOrganization {
		projects = nil
		for _, obj := range c.inf.Projects.GetStore().List() {
			if u := hierarchy.Object(obj); u != nil && u.GetLabels()[tenancy.OrganizationLabel] == org {
				projects = append(projects, u.GetName())
			}
		}
	}
	for _, project := range projects {
		client, err := dynamic.NewForConfigAndClient(c.clients.Config(project), c.clients.HTTPClient())
		if err != nil {
			return err
		}
		opts := metav1.ListOptions{Limit: 500}
		for {
			list, err := client.Resource(mapping.Resource).List(ctx, opts)
			if apierrors.IsNotFound(err) {
				break // the project is going, or does not serve the kind
			}
			if err != nil {
				return err
			}
			for i := range list.Items {
				if err := c.claimExisting(ctx, k, org, p, project, mapping.Resource, &list.Items[i]); err != nil {
					return err
				}
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	return nil
}

// claimExisting stores the claim p makes for u, when it is k's consumer's.
func (c *Controller) claimExisting(ctx context.Context, k quota.BucketKey, org string, p *quota.ClaimPolicy, project string, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error {
	if u.GetDeletionTimestamp() != nil {
		return nil
	}
	trigger := quota.TriggerRef{Project: project, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Kind: u.GetKind(),
		Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID())}
	// Who created it is not known any more: the user is nobody.
	vars := quota.Vars{Trigger: u.Object, User: map[string]any{"name": "", "uid": "", "groups": []any{}, "extra": map[string]any{}},
		RequestInfo: map[string]any{"verb": "create", "apiGroup": gvr.Group, "apiVersion": gvr.Version, "resource": gvr.Resource, "subresource": "",
			"name": u.GetName(), "namespace": u.GetNamespace()}}
	plan, ok, err := p.Plan(vars, trigger, existingConsumers{c: c, ctx: ctx, project: project, org: org})
	if err != nil || !ok || plan.Consumer != k.Consumer {
		return nil // an expression that needs the request (user, requestInfo) cannot say
	}
	// Only what the consumer has buckets for, as admission would have charged.
	kept := plan.Requests[:0:0]
	for _, r := range plan.Requests {
		if c.ledger.Bucket(quota.BucketKey{Consumer: plan.Consumer, ResourceType: r.ResourceType}).Exists {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	plan.Requests = kept
	if _, err := create(ctx, c.platform.Resource(quotav1alpha1.ClaimsResource).Namespace(plan.Namespace), plan.Object()); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// existingConsumers resolves the consumers of a stored object.
type existingConsumers struct {
	c            *Controller
	ctx          context.Context
	project, org string
}

func (e existingConsumers) Default(kind string) (quota.Consumer, bool) {
	switch {
	case kind == quota.KindProject && e.project != "":
		return quota.Consumer{Kind: quota.KindProject, Name: e.project}, true
	case kind == quota.KindOrganization:
		return quota.Consumer{Kind: quota.KindOrganization, Name: e.org}, true
	}
	return quota.Consumer{}, false
}

func (e existingConsumers) Organization(c quota.Consumer) (string, error) {
	return quota.OrganizationOf(e.ctx, e.c.hierarchy, c)
}

func (e existingConsumers) KindFor(resourceType string) string {
	return e.c.ledger.ConsumerKind(resourceType)
}
