// Package v1alpha1 holds Milo's provider quotas: what a provider makes
// quota-able (ResourceRegistration), what it allows each consumer
// (ResourceGrant), what a consumer uses (ResourceClaim), the per-consumer
// totals (AllowanceBucket), and the policies that create claims and grants
// (ClaimCreationPolicy, GrantCreationPolicy). Group, kinds and field names
// are those of upstream Milo's quota API, so its tooling reads them.
//
// +groupName=quota.miloapis.com
// +kubebuilder:object:generate=true
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=com.miloapis.quota.v1alpha1
package v1alpha1
