// Package v1alpha1 holds the resource hierarchy kinds of Milo: Organizations,
// Folders, Projects and OrganizationMemberships.
//
// +groupName=resourcemanager.miloapis.com
// +kubebuilder:object:generate=true
package v1alpha1
