package quota

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Annotations of the claims admission creates: which object a claim is for,
// so that the quota controller can tell when it is gone.
const (
	// TriggerAnnotation is the object's TriggerRef.Key().
	TriggerAnnotation = "quota.miloapis.com/trigger"
	// TriggerProjectAnnotation names the project the object is in (none: the platform).
	TriggerProjectAnnotation = "quota.miloapis.com/trigger-project"
	// TriggerResourceAnnotation is the object's group/version/resource.
	TriggerResourceAnnotation = "quota.miloapis.com/trigger-resource"
	// TriggerUIDAnnotation is the object's uid: a recreated object of the
	// same name is another object, with its own claim.
	TriggerUIDAnnotation = "quota.miloapis.com/trigger-uid"
)

// TriggerRef is the object a claim is for.
type TriggerRef struct {
	Project                  string
	Group, Version, Resource string
	Kind, Namespace, Name    string
	UID                      string
}

// GroupKind returns the object's group and kind.
func (t TriggerRef) GroupKind() schema.GroupKind {
	return schema.GroupKind{Group: t.Group, Kind: t.Kind}
}

// GroupVersionResource returns the object's resource.
func (t TriggerRef) GroupVersionResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: t.Group, Version: t.Version, Resource: t.Resource}
}

// Key identifies the object by project, resource, namespace and name.
func (t TriggerRef) Key() string {
	return t.Project + "|" + t.Group + "/" + t.Resource + "|" + t.Namespace + "/" + t.Name
}

// ObjectKey identifies the one object: its Key and its uid (another
// create of the same name is another object).
func (t TriggerRef) ObjectKey() string { return t.Key() + "|" + t.UID }

// TriggerFromAnnotations reads back the TriggerRef of a claim admission created.
func TriggerFromAnnotations(c *quotav1alpha1.ResourceClaim) (TriggerRef, bool) {
	a := c.Annotations
	gvr := strings.Split(a[TriggerResourceAnnotation], "/")
	if len(gvr) != 3 || a[TriggerUIDAnnotation] == "" || c.Spec.ResourceRef == nil {
		return TriggerRef{}, false
	}
	return TriggerRef{Project: a[TriggerProjectAnnotation], Group: gvr[0], Version: gvr[1], Resource: gvr[2],
		Kind: c.Spec.ResourceRef.Kind, Namespace: c.Spec.ResourceRef.Namespace, Name: c.Spec.ResourceRef.Name, UID: a[TriggerUIDAnnotation]}, true
}

// ClaimPlan is a claim admission is about to create.
type ClaimPlan struct {
	Namespace, Name string
	Policy          string
	Consumer        Consumer
	Requests        []quotav1alpha1.ResourceRequest
	Trigger         TriggerRef
	Annotations     map[string]string
	Labels          map[string]string
}

// ClaimName is the name of the claim policy makes for the object with uid:
// one claim per policy and object, whoever retries the create.
func ClaimName(policy, uid string) string {
	name := policy + "-" + uid
	if len(name) <= 253 {
		return name
	}
	sum := sha256.Sum256([]byte(policy))
	return hex.EncodeToString(sum[:8]) + "-" + uid
}

// Consumers resolves the consumers of an object: who is charged when a
// policy names a kind but not a name, and in which organization a consumer is.
type Consumers interface {
	// Default returns the consumer of kind the object belongs to.
	Default(kind string) (Consumer, bool)
	// Organization returns the organization of c.
	Organization(c Consumer) (string, error)
	// KindFor returns the consumer kind the registration of resourceType charges.
	KindFor(resourceType string) string
}

// Plan returns the claim p makes for an object, or ok false when its
// constraints do not hold for it.
func (p *ClaimPolicy) Plan(vars Vars, trigger TriggerRef, consumers Consumers) (plan ClaimPlan, ok bool, err error) {
	act := vars.activation()
	if ok, err := holds(p.conditions, act); !ok || err != nil {
		return ClaimPlan{}, false, err
	}
	kind, err := p.consumer.kind.render(act)
	if err != nil {
		return ClaimPlan{}, false, fmt.Errorf("consumerRef.kind: %w", err)
	}
	name, err := p.consumer.name.render(act)
	if err != nil {
		return ClaimPlan{}, false, fmt.Errorf("consumerRef.name: %w", err)
	}
	c := Consumer{Kind: kind, Name: name}
	if c.Kind == "" && len(p.requests) > 0 {
		// The kind the registration of the requests charges.
		c.Kind = consumers.KindFor(p.requests[0].ResourceType)
	}
	if c.Kind == "" {
		return ClaimPlan{}, false, nil // nothing registered to charge
	}
	if c.Name == "" {
		d, found := consumers.Default(c.Kind)
		if !found {
			// Not a consumer's object (a Namespace of the platform, say): nobody to charge.
			return ClaimPlan{}, false, nil
		}
		c = d
	}
	org, err := consumers.Organization(c)
	if err != nil {
		return ClaimPlan{}, false, err
	}
	plan = ClaimPlan{Namespace: tenancy.OrganizationNamespace(org), Name: ClaimName(p.Name, trigger.UID), Policy: p.Name,
		Consumer: c, Requests: p.requests, Trigger: trigger,
		Labels:      map[string]string{quotav1alpha1.AutoCreatedLabel: "true", quotav1alpha1.PolicyLabel: LabelValue(p.Name)},
		Annotations: map[string]string{}}
	for k, v := range p.labels {
		plan.Labels[k] = v
	}
	for k, t := range p.annotations {
		if plan.Annotations[k], err = t.render(act); err != nil {
			return ClaimPlan{}, false, fmt.Errorf("annotation %s: %w", k, err)
		}
	}
	return plan, true, nil
}

// LabelValue fits s in a label value (63 characters).
func LabelValue(s string) string {
	if len(s) <= 63 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:46] + "-" + hex.EncodeToString(sum[:8])
}

// Object returns the ResourceClaim of plan.
func (plan ClaimPlan) Object() *quotav1alpha1.ResourceClaim {
	t := plan.Trigger
	ann := map[string]string{TriggerAnnotation: t.Key(), TriggerResourceAnnotation: t.Group + "/" + t.Version + "/" + t.Resource, TriggerUIDAnnotation: t.UID}
	if t.Project != "" {
		ann[TriggerProjectAnnotation] = t.Project
	}
	for k, v := range plan.Annotations {
		if _, reserved := ann[k]; !reserved {
			ann[k] = v
		}
	}
	c := &quotav1alpha1.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: quotav1alpha1.SchemeGroupVersion.String(), Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: plan.Namespace, Name: plan.Name, Labels: plan.Labels, Annotations: ann},
		Spec: quotav1alpha1.ResourceClaimSpec{ConsumerRef: plan.Consumer.Ref(), Requests: plan.Requests,
			ResourceRef: &quotav1alpha1.UnversionedObjectReference{APIGroup: t.Group, Kind: t.Kind, Name: t.Name, Namespace: t.Namespace}},
	}
	// Granted as it is stored: the ledger reserved its units first.
	now := metav1.Now()
	for _, r := range plan.Requests {
		c.Status.Allocations = append(c.Status.Allocations, quotav1alpha1.ResourceClaimAllocationStatus{
			ResourceType: r.ResourceType, Status: "Granted", Reason: quotav1alpha1.ReasonQuotaAvailable, AllocatedAmount: r.Amount,
			AllocatingBucket: BucketName(BucketKey{Consumer: plan.Consumer, ResourceType: r.ResourceType}), LastTransitionTime: now})
	}
	c.Status.Conditions = []metav1.Condition{{Type: quotav1alpha1.ConditionGranted, Status: metav1.ConditionTrue, Reason: quotav1alpha1.ReasonQuotaAvailable,
		Message: "reserved at admission", LastTransitionTime: now}}
	return c
}

// BucketName is the name of k's AllowanceBucket.
func BucketName(k BucketKey) string {
	sum := sha256.Sum256([]byte(k.ResourceType))
	return strings.ToLower(k.Consumer.Kind) + "-" + k.Consumer.Name + "-" + hex.EncodeToString(sum[:4])
}
