// Package v1alpha1 holds Milo's identity and access kinds: Roles, PolicyBindings,
// Users, Groups, GroupMemberships, ServiceAccounts and ProtectedResources.
//
// +groupName=iam.miloapis.com
// +kubebuilder:object:generate=true
package v1alpha1
