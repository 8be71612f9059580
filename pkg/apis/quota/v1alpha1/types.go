package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Registration types: how a registered resource is measured.
const (
	// TypeEntity counts objects: each claiming object uses a whole number of units.
	TypeEntity = "Entity"
	// TypeAllocation measures an amount (bytes, millicores) each claim names.
	TypeAllocation = "Allocation"
	// TypeFeature is an entitlement: grants say whether a consumer has it;
	// nothing is claimed or enforced at admission.
	TypeFeature = "Feature"
)

// Condition types and reasons of the quota kinds.
const (
	// ConditionActive, on registrations and grants: in effect.
	ConditionActive = "Active"
	// ConditionGranted, on claims: the units are the consumer's.
	ConditionGranted = "Granted"
	// ConditionReady, on policies: validated and applied.
	ConditionReady = "Ready"

	ReasonRegistrationActive = "RegistrationActive"
	ReasonGrantActive        = "GrantActive"
	ReasonValidationFailed   = "ValidationFailed"
	ReasonQuotaAvailable     = "QuotaAvailable"
	ReasonQuotaExceeded      = "QuotaExceeded"
	ReasonPolicyReady        = "PolicyReady"
	ReasonPolicyDisabled     = "PolicyDisabled"
)

// Labels and annotations the server sets on the objects it creates.
const (
	// AutoCreatedLabel marks claims admission created and grants a policy created.
	AutoCreatedLabel = "quota.miloapis.com/auto-created"
	// PolicyLabel names the policy that created a claim or grant.
	PolicyLabel = "quota.miloapis.com/policy"
	// ConsumerKindLabel and ConsumerNameLabel, on buckets, name their consumer.
	ConsumerKindLabel = "quota.miloapis.com/consumer-kind"
	ConsumerNameLabel = "quota.miloapis.com/consumer-name"
)

// ConsumerType is the kind that receives grants and is charged by claims:
// Organization or Project (group resourcemanager.miloapis.com) in Milo.
type ConsumerType struct {
	// APIGroup of the consumer kind.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	APIGroup string `json:"apiGroup" protobuf:"bytes,1,opt,name=apiGroup"`
	// Kind of the consumer.
	// +kubebuilder:validation:Required
	Kind string `json:"kind" protobuf:"bytes,2,opt,name=kind"`
}

// ClaimingResource is a kind whose objects may claim a registered resource.
type ClaimingResource struct {
	// APIGroup of the kind; empty for the core group.
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	APIGroup string `json:"apiGroup,omitempty" protobuf:"bytes,1,opt,name=apiGroup"`
	// Kind of the claiming objects.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind" protobuf:"bytes,2,opt,name=kind"`
}

// ResourceRegistrationSpec says what is measured, in which unit, charged to whom.
type ResourceRegistrationSpec struct {
	// ConsumerType receives grants and is charged by claims. Immutable.
	// +kubebuilder:validation:Required
	ConsumerType ConsumerType `json:"consumerType" protobuf:"bytes,1,opt,name=consumerType"`
	// Type is Entity, Allocation or Feature. Immutable.
	// +kubebuilder:validation:Enum=Entity;Allocation;Feature
	// +kubebuilder:validation:Required
	Type string `json:"type" protobuf:"bytes,2,opt,name=type"`
	// ResourceType names the measured resource, e.g.
	// "resourcemanager.miloapis.com/projects". Immutable.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ResourceType string `json:"resourceType" protobuf:"bytes,3,opt,name=resourceType"`
	// Description for people.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=500
	// +optional
	Description string `json:"description,omitempty" protobuf:"bytes,4,opt,name=description"`
	// BaseUnit is the unit amounts are counted in ("project", "byte").
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	BaseUnit string `json:"baseUnit" protobuf:"bytes,5,opt,name=baseUnit"`
	// DisplayUnit is the unit shown to people ("GiB").
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	DisplayUnit string `json:"displayUnit" protobuf:"bytes,6,opt,name=displayUnit"`
	// UnitConversionFactor: display value = base value / factor.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Minimum=1
	UnitConversionFactor int64 `json:"unitConversionFactor" protobuf:"varint,7,opt,name=unitConversionFactor"`
	// ClaimingResources are the kinds whose objects may claim this resource.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	ClaimingResources []ClaimingResource `json:"claimingResources" protobuf:"bytes,8,rep,name=claimingResources"`
}

// ResourceRegistrationStatus says whether the registration is in effect.
type ResourceRegistrationStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Conditions: Active.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
}

// ResourceRegistration makes a resource quota-able: grants allow it to
// consumers and claims use it. Registered on the platform by a provider.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Resource Type",type=string,JSONPath=`.spec.resourceType`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.conditions[?(@.type=="Active")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.consumerType.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.consumerType.apiGroup`
// +kubebuilder:selectablefield:JSONPath=`.spec.resourceType`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec) || self.spec.resourceType == oldSelf.spec.resourceType",message="spec.resourceType is immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec) || self.spec.consumerType == oldSelf.spec.consumerType",message="spec.consumerType is immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec) || self.spec.type == oldSelf.spec.type",message="spec.type is immutable"
type ResourceRegistration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// +kubebuilder:validation:Required
	Spec   ResourceRegistrationSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status ResourceRegistrationStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ResourceRegistrationList is a list of ResourceRegistrations.
// +kubebuilder:object:root=true
type ResourceRegistrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []ResourceRegistration `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// ConsumerRef names one consumer.
type ConsumerRef struct {
	// APIGroup of the consumer; resourcemanager.miloapis.com in Milo.
	// +optional
	APIGroup string `json:"apiGroup,omitempty" protobuf:"bytes,1,opt,name=apiGroup"`
	// Kind of the consumer: Organization or Project.
	// +kubebuilder:validation:Required
	Kind string `json:"kind" protobuf:"bytes,2,opt,name=kind"`
	// Name of the consumer.
	// +kubebuilder:validation:Required
	Name string `json:"name" protobuf:"bytes,3,opt,name=name"`
	// Namespace of a namespaced consumer; empty for Organizations and Projects.
	// +optional
	Namespace string `json:"namespace,omitempty" protobuf:"bytes,4,opt,name=namespace"`
}

// UnversionedObjectReference names an object by group, kind, namespace and name.
type UnversionedObjectReference struct {
	// +optional
	APIGroup string `json:"apiGroup,omitempty" protobuf:"bytes,1,opt,name=apiGroup"`
	// +kubebuilder:validation:Required
	Kind string `json:"kind" protobuf:"bytes,2,opt,name=kind"`
	// +kubebuilder:validation:Required
	Name string `json:"name" protobuf:"bytes,3,opt,name=name"`
	// +optional
	Namespace string `json:"namespace,omitempty" protobuf:"bytes,4,opt,name=namespace"`
}

// Bucket is one amount of an allowance.
type Bucket struct {
	// Amount in the registration's base unit.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Required
	Amount int64 `json:"amount" protobuf:"varint,1,opt,name=amount"`
}

// Allowance is what a grant allows of one resource type: the sum of its buckets.
type Allowance struct {
	// ResourceType of a registration.
	// +kubebuilder:validation:Required
	ResourceType string `json:"resourceType" protobuf:"bytes,1,opt,name=resourceType"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinItems=1
	Buckets []Bucket `json:"buckets" protobuf:"bytes,2,rep,name=buckets"`
}

// ResourceGrantSpec allows a consumer amounts of resource types.
type ResourceGrantSpec struct {
	// ConsumerRef receives the allowances.
	// +kubebuilder:validation:Required
	ConsumerRef ConsumerRef `json:"consumerRef" protobuf:"bytes,1,opt,name=consumerRef"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	Allowances []Allowance `json:"allowances" protobuf:"bytes,2,rep,name=allowances"`
}

// ResourceGrantStatus says whether the grant counts.
type ResourceGrantStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Conditions: Active.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
}

// ResourceGrant allows a consumer amounts of registered resources. Grants of
// one consumer and resource type add up in its AllowanceBucket. In Milo a
// grant lives in the namespace organization-{org} of its consumer's
// organization, written at the platform.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Consumer Type",type=string,JSONPath=`.spec.consumerRef.kind`
// +kubebuilder:printcolumn:name="Consumer",type=string,JSONPath=`.spec.consumerRef.name`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.conditions[?(@.type=="Active")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.consumerRef.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.consumerRef.name`
type ResourceGrant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// +kubebuilder:validation:Required
	Spec   ResourceGrantSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status ResourceGrantStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ResourceGrantList is a list of ResourceGrants.
// +kubebuilder:object:root=true
type ResourceGrantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []ResourceGrant `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// ResourceRequest is an amount of one resource type.
type ResourceRequest struct {
	// +kubebuilder:validation:Required
	ResourceType string `json:"resourceType" protobuf:"bytes,1,opt,name=resourceType"`
	// Amount in the registration's base unit.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Required
	Amount int64 `json:"amount" protobuf:"varint,2,opt,name=amount"`
}

// ResourceClaimSpec is what one object uses of its consumer's allowances.
type ResourceClaimSpec struct {
	// ConsumerRef is charged.
	// +optional
	ConsumerRef ConsumerRef `json:"consumerRef,omitempty" protobuf:"bytes,1,opt,name=consumerRef"`
	// Requests are granted all together or not at all.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +listType=map
	// +listMapKey=resourceType
	Requests []ResourceRequest `json:"requests" protobuf:"bytes,2,rep,name=requests"`
	// ResourceRef is the object the claim is for.
	// +optional
	ResourceRef *UnversionedObjectReference `json:"resourceRef,omitempty" protobuf:"bytes,3,opt,name=resourceRef"`
}

// ResourceClaimAllocationStatus is the outcome of one request.
type ResourceClaimAllocationStatus struct {
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	ResourceType string `json:"resourceType" protobuf:"bytes,1,opt,name=resourceType"`
	// +kubebuilder:validation:Enum=Granted;Denied;Pending
	// +kubebuilder:validation:Required
	Status string `json:"status" protobuf:"bytes,2,opt,name=status"`
	// +optional
	Reason string `json:"reason,omitempty" protobuf:"bytes,3,opt,name=reason"`
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,4,opt,name=message"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	AllocatedAmount int64 `json:"allocatedAmount,omitempty" protobuf:"varint,5,opt,name=allocatedAmount"`
	// AllocatingBucket is the name of the bucket charged.
	// +optional
	AllocatingBucket string `json:"allocatingBucket,omitempty" protobuf:"bytes,6,opt,name=allocatingBucket"`
	// +kubebuilder:validation:Required
	LastTransitionTime metav1.Time `json:"lastTransitionTime" protobuf:"bytes,7,opt,name=lastTransitionTime"`
}

// ResourceClaimStatus says whether the claim was granted.
type ResourceClaimStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// +listType=map
	// +listMapKey=resourceType
	// +optional
	Allocations []ResourceClaimAllocationStatus `json:"allocations,omitempty" protobuf:"bytes,2,rep,name=allocations"`
	// Conditions: Granted.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,3,rep,name=conditions"`
}

// ResourceClaim is what one object uses of its consumer's allowances. The
// server creates one, at admission, for each object a ClaimCreationPolicy
// matches, in the namespace organization-{org} of the consumer's
// organization, and deletes it when the object is gone. It is created
// granted, status included, in one write (so, unlike upstream, it has no
// status subresource): a charged create costs one write more, not two.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=milo
// +kubebuilder:printcolumn:name="Granted",type=string,JSONPath=`.status.conditions[?(@.type=="Granted")].status`
// +kubebuilder:printcolumn:name="Resource",type=string,JSONPath=`.spec.requests[0].resourceType`
// +kubebuilder:printcolumn:name="Consumer",type=string,JSONPath=`.spec.consumerRef.name`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.consumerRef.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.consumerRef.name`
// +kubebuilder:selectablefield:JSONPath=`.spec.resourceRef.apiGroup`
// +kubebuilder:selectablefield:JSONPath=`.spec.resourceRef.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.resourceRef.name`
// +kubebuilder:selectablefield:JSONPath=`.spec.resourceRef.namespace`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec) || self.spec == oldSelf.spec",message="spec is immutable"
type ResourceClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// +kubebuilder:validation:Required
	Spec   ResourceClaimSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status ResourceClaimStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ResourceClaimList is a list of ResourceClaims.
// +kubebuilder:object:root=true
type ResourceClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []ResourceClaim `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// ContributingGrantRef is a grant that adds to a bucket's limit.
type ContributingGrantRef struct {
	// +kubebuilder:validation:Required
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// +kubebuilder:validation:Required
	LastObservedGeneration int64 `json:"lastObservedGeneration" protobuf:"varint,2,opt,name=lastObservedGeneration"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Required
	Amount int64 `json:"amount" protobuf:"varint,3,opt,name=amount"`
}

// AllowanceBucketSpec names the consumer and resource type a bucket totals.
type AllowanceBucketSpec struct {
	// +kubebuilder:validation:Required
	ConsumerRef ConsumerRef `json:"consumerRef" protobuf:"bytes,1,opt,name=consumerRef"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ResourceType string `json:"resourceType" protobuf:"bytes,2,opt,name=resourceType"`
}

// AllowanceBucketStatus is the consumer's limit and use of the resource type.
type AllowanceBucketStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Limit is the sum of the consumer's active grants.
	// +kubebuilder:validation:Minimum=0
	Limit int64 `json:"limit" protobuf:"varint,2,opt,name=limit"`
	// Allocated is the sum of the consumer's granted claims.
	// +kubebuilder:validation:Minimum=0
	Allocated int64 `json:"allocated" protobuf:"varint,3,opt,name=allocated"`
	// Available is Limit - Allocated, never below 0.
	// +kubebuilder:validation:Minimum=0
	Available int64 `json:"available" protobuf:"varint,4,opt,name=available"`
	// +kubebuilder:validation:Minimum=0
	ClaimCount int32 `json:"claimCount" protobuf:"varint,5,opt,name=claimCount"`
	// +kubebuilder:validation:Minimum=0
	GrantCount int32 `json:"grantCount" protobuf:"varint,6,opt,name=grantCount"`
	// +optional
	ContributingGrantRefs []ContributingGrantRef `json:"contributingGrantRefs,omitempty" protobuf:"bytes,7,rep,name=contributingGrantRefs"`
	// +optional
	LastReconciliation *metav1.Time `json:"lastReconciliation,omitempty" protobuf:"bytes,8,opt,name=lastReconciliation"`
}

// AllowanceBucket is one consumer's limit and use of one resource type,
// kept by the server from grants and claims, in the namespace
// organization-{org} of the consumer's organization.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Consumer",type=string,JSONPath=`.spec.consumerRef.name`
// +kubebuilder:printcolumn:name="Resource Type",type=string,JSONPath=`.spec.resourceType`
// +kubebuilder:printcolumn:name="Limit",type=integer,JSONPath=`.status.limit`
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=`.status.allocated`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.available`
// +kubebuilder:printcolumn:name="Claims",type=integer,JSONPath=`.status.claimCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.consumerRef.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.consumerRef.name`
// +kubebuilder:selectablefield:JSONPath=`.spec.resourceType`
type AllowanceBucket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// +kubebuilder:validation:Required
	Spec   AllowanceBucketSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status AllowanceBucketStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// AllowanceBucketList is a list of AllowanceBuckets.
// +kubebuilder:object:root=true
type AllowanceBucketList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []AllowanceBucket `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// ConditionExpression is a CEL expression that must be true.
type ConditionExpression struct {
	// Expression, plain CEL without {{ }}.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Expression string `json:"expression" protobuf:"bytes,1,opt,name=expression"`
	// Message for people.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,2,opt,name=message"`
}

// ObjectMetaTemplate is the metadata of a created object; string values may
// hold CEL expressions in {{ }}.
type ObjectMetaTemplate struct {
	// +optional
	Name string `json:"name,omitempty" protobuf:"bytes,1,opt,name=name"`
	// +optional
	GenerateName string `json:"generateName,omitempty" protobuf:"bytes,2,opt,name=generateName"`
	// +optional
	Namespace string `json:"namespace,omitempty" protobuf:"bytes,3,opt,name=namespace"`
	// Labels, literal.
	// +optional
	Labels map[string]string `json:"labels,omitempty" protobuf:"bytes,4,rep,name=labels"`
	// Annotations; values may hold {{ }} expressions.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty" protobuf:"bytes,5,rep,name=annotations"`
}

// ClaimTriggerResource is the kind whose creation triggers a claim.
type ClaimTriggerResource struct {
	// APIVersion, "group/version" or "v1".
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^(v[0-9]+((alpha|beta)[0-9]*)?|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/v[0-9]+((alpha|beta)[0-9]*)?)$`
	APIVersion string `json:"apiVersion" protobuf:"bytes,1,opt,name=apiVersion"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind" protobuf:"bytes,2,opt,name=kind"`
}

// ClaimTriggerSpec is the kind and the conditions that trigger a claim.
type ClaimTriggerSpec struct {
	// +kubebuilder:validation:Required
	Resource ClaimTriggerResource `json:"resource" protobuf:"bytes,1,opt,name=resource"`
	// Constraints must all be true.
	// +kubebuilder:validation:MaxItems=10
	// +optional
	Constraints []ConditionExpression `json:"constraints,omitempty" protobuf:"bytes,2,rep,name=constraints"`
}

// ResourceClaimTemplate is the claim a policy creates.
// +kubebuilder:validation:XValidation:rule="!has(self.spec.resourceRef)",message="resourceRef field is automatically populated and cannot be set in template"
type ResourceClaimTemplate struct {
	// +kubebuilder:validation:Required
	Metadata ObjectMetaTemplate `json:"metadata" protobuf:"bytes,1,opt,name=metadata"`
	// +kubebuilder:validation:Required
	Spec ResourceClaimSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
}

// ClaimTargetSpec is what a policy creates.
type ClaimTargetSpec struct {
	// +kubebuilder:validation:Required
	ResourceClaimTemplate ResourceClaimTemplate `json:"resourceClaimTemplate" protobuf:"bytes,1,opt,name=resourceClaimTemplate"`
}

// ClaimCreationPolicySpec: which creations claim what.
type ClaimCreationPolicySpec struct {
	// +kubebuilder:validation:Required
	Trigger ClaimTriggerSpec `json:"trigger" protobuf:"bytes,1,opt,name=trigger"`
	// +kubebuilder:validation:Required
	Target ClaimTargetSpec `json:"target" protobuf:"bytes,2,opt,name=target"`
	// Disabled policies create no claims.
	// +kubebuilder:default=false
	// +optional
	Disabled *bool `json:"disabled,omitempty" protobuf:"varint,3,opt,name=disabled"`
}

// ClaimCreationPolicyStatus says whether the policy is applied.
type ClaimCreationPolicyStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
}

// ClaimCreationPolicy makes the creation of matching objects claim quota, at
// admission: the create is refused when its consumer's allowance is used up.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.trigger.resource.kind`
// +kubebuilder:printcolumn:name="Disabled",type=boolean,JSONPath=`.spec.disabled`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.trigger.resource.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.trigger.resource.apiVersion`
type ClaimCreationPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// +kubebuilder:validation:Required
	Spec   ClaimCreationPolicySpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status ClaimCreationPolicyStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ClaimCreationPolicyList is a list of ClaimCreationPolicies.
// +kubebuilder:object:root=true
type ClaimCreationPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []ClaimCreationPolicy `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// GrantTriggerResource is the kind whose objects get grants.
type GrantTriggerResource struct {
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?v[0-9]+((alpha|beta)[0-9]*)?$`
	APIVersion string `json:"apiVersion" protobuf:"bytes,1,opt,name=apiVersion"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][a-zA-Z0-9]*$`
	Kind string `json:"kind" protobuf:"bytes,2,opt,name=kind"`
}

// GrantTriggerSpec is the kind and conditions that trigger a grant.
type GrantTriggerSpec struct {
	// +kubebuilder:validation:Required
	Resource GrantTriggerResource `json:"resource" protobuf:"bytes,1,opt,name=resource"`
	// +kubebuilder:validation:MaxItems=10
	// +optional
	Constraints []ConditionExpression `json:"constraints,omitempty" protobuf:"bytes,2,rep,name=constraints"`
}

// GrantParentContextSpec would place grants in another control plane;
// Milo has one, and refuses policies that set it.
type GrantParentContextSpec struct {
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MaxLength=253
	APIGroup string `json:"apiGroup" protobuf:"bytes,1,opt,name=apiGroup"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind" protobuf:"bytes,2,opt,name=kind"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	NameExpression string `json:"nameExpression" protobuf:"bytes,3,opt,name=nameExpression"`
}

// ResourceGrantTemplate is the grant a policy creates.
type ResourceGrantTemplate struct {
	// +kubebuilder:validation:Required
	Metadata ObjectMetaTemplate `json:"metadata" protobuf:"bytes,1,opt,name=metadata"`
	// +kubebuilder:validation:Required
	Spec ResourceGrantSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
}

// GrantTargetSpec is what a grant policy creates.
type GrantTargetSpec struct {
	// +optional
	ParentContext *GrantParentContextSpec `json:"parentContext,omitempty" protobuf:"bytes,1,opt,name=parentContext"`
	// +kubebuilder:validation:Required
	ResourceGrantTemplate ResourceGrantTemplate `json:"resourceGrantTemplate" protobuf:"bytes,2,opt,name=resourceGrantTemplate"`
}

// GrantCreationPolicySpec: which consumers get which grants.
type GrantCreationPolicySpec struct {
	// +kubebuilder:validation:Required
	Trigger GrantTriggerSpec `json:"trigger" protobuf:"bytes,1,opt,name=trigger"`
	// +kubebuilder:validation:Required
	Target GrantTargetSpec `json:"target" protobuf:"bytes,2,opt,name=target"`
	// +kubebuilder:default=false
	// +optional
	Disabled *bool `json:"disabled,omitempty" protobuf:"varint,3,opt,name=disabled"`
}

// GrantCreationPolicyStatus says whether the policy is applied.
type GrantCreationPolicyStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
}

// GrantCreationPolicy gives consumers a grant when they are created (and,
// for those that exist, when the policy is): a default allowance.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Trigger",type=string,JSONPath=`.spec.trigger.resource.kind`
// +kubebuilder:printcolumn:name="Disabled",type=boolean,JSONPath=`.spec.disabled`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.trigger.resource.kind`
// +kubebuilder:selectablefield:JSONPath=`.spec.trigger.resource.apiVersion`
type GrantCreationPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// +kubebuilder:validation:Required
	Spec   GrantCreationPolicySpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status GrantCreationPolicyStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// GrantCreationPolicyList is a list of GrantCreationPolicies.
// +kubebuilder:object:root=true
type GrantCreationPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []GrantCreationPolicy `json:"items" protobuf:"bytes,2,rep,name=items"`
}
