// Package v1alpha1 holds the resource hierarchy kinds of Milo: Organizations,
// Folders, Projects and OrganizationMemberships.
//
// +groupName=resourcemanager.miloapis.com
// +kubebuilder:object:generate=true
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=com.miloapis.resourcemanager.v1alpha1
package v1alpha1
