// Package v1alpha1 holds the sample service's one kind, Widget: a provider's
// API, registered on the platform as a CRD and served in every project.
//
// +groupName=widgets.samples.miloapis.example
// +kubebuilder:object:generate=true
package v1alpha1
