package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of provider quotas.
const GroupName = "quota.miloapis.com"

// SchemeGroupVersion is the group and version of this package's kinds.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder registers this package's kinds with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// The resources of this package's kinds.
var (
	RegistrationsResource         = SchemeGroupVersion.WithResource("resourceregistrations")
	GrantsResource                = SchemeGroupVersion.WithResource("resourcegrants")
	ClaimsResource                = SchemeGroupVersion.WithResource("resourceclaims")
	BucketsResource               = SchemeGroupVersion.WithResource("allowancebuckets")
	ClaimCreationPoliciesResource = SchemeGroupVersion.WithResource("claimcreationpolicies")
	GrantCreationPoliciesResource = SchemeGroupVersion.WithResource("grantcreationpolicies")
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&ResourceRegistration{}, &ResourceRegistrationList{},
		&ResourceGrant{}, &ResourceGrantList{},
		&ResourceClaim{}, &ResourceClaimList{},
		&AllowanceBucket{}, &AllowanceBucketList{},
		&ClaimCreationPolicy{}, &ClaimCreationPolicyList{},
		&GrantCreationPolicy{}, &GrantCreationPolicyList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
