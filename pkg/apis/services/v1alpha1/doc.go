// Package v1alpha1 holds Milo's service catalog: the Services providers
// register on the platform and the ServiceActivations by which a project
// enables one.
//
// +groupName=services.miloapis.com
// +kubebuilder:object:generate=true
package v1alpha1
