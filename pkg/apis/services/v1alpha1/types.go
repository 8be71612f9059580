package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is where a Service is in its life.
// +kubebuilder:validation:Enum=Draft;Published;Deprecated;Retired
type Phase string

// Phases of a Service.
const (
	// Draft: being prepared; consumers do not see it and cannot enable it.
	Draft Phase = "Draft"
	// Published: in the catalog; projects may enable it.
	Published Phase = "Published"
	// Deprecated: in the catalog; enabling it still works, with a warning.
	Deprecated Phase = "Deprecated"
	// Retired: out of the catalog; nobody may enable it any more. Projects
	// that enabled it before keep it until they disable it.
	Retired Phase = "Retired"
)

// Context is where a service's resource is served.
// +kubebuilder:validation:Enum=Project;Organization;Platform
type Context string

// Contexts a resource can be served in.
const (
	// ContextProject: in the projects that enabled the service.
	ContextProject Context = "Project"
	// ContextOrganization: in every organization's context, once the
	// service is out of Draft.
	ContextOrganization Context = "Organization"
	// ContextPlatform: at the platform only.
	ContextPlatform Context = "Platform"
)

// PhaseLabel, on a Service, mirrors spec.phase: the server sets it, so that
// the catalog consumers read selects the services they may see.
const PhaseLabel = "services.miloapis.com/phase"

// Condition types of a Service.
const (
	// ConditionReady is true when every API the Service lists is served.
	ConditionReady = "Ready"
)

// Service is a provider's offering, registered on the platform: the API
// resources it serves, where each appears, its permissions and roles, and
// its phase. Until a Service lists a resource, the resource is served in
// every project; once one does, a project sees it only after it enables the
// Service with a ServiceActivation.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Display Name",type=string,JSONPath=`.spec.displayName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.spec.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Service struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceSpec   `json:"spec"`
	Status ServiceStatus `json:"status,omitempty"`
}

// ServiceSpec describes a service.
type ServiceSpec struct {
	// DisplayName is the name consumers see.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +required
	DisplayName string `json:"displayName"`
	// Description says what the service does.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Description string `json:"description,omitempty"`
	// Phase is where the service is in its life: Draft (the default),
	// Published, Deprecated or Retired.
	// +kubebuilder:default=Draft
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Resources are the API resources the service serves: CRDs it installed
	// on the platform, or resources of an aggregated APIService. A resource
	// belongs to one Service at most.
	// +listType=map
	// +listMapKey=group
	// +listMapKey=resource
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Resources []ServiceResource `json:"resources,omitempty"`
	// ProtectedResources name the ProtectedResources that register the
	// service's permissions with IAM.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	ProtectedResources []LocalReference `json:"protectedResources,omitempty"`
	// DefaultRoles name the Roles the service offers its consumers: Roles
	// of the platform (milo-system), which every consumer may bind in its
	// PolicyBindings. The Ready condition is False until each exists.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	DefaultRoles []RoleReference `json:"defaultRoles,omitempty"`
}

// ServiceResource is one API resource of a service.
type ServiceResource struct {
	// Group is the resource's API group; a service's resources are never
	// in the core group.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Group string `json:"group"`
	// Resource is the resource's plural name, as in its URLs.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Resource string `json:"resource"`
	// Context is where the resource appears: Project (the default; in the
	// projects that enabled the service), Organization (in every
	// organization's context) or Platform (at the platform only).
	// +kubebuilder:default=Project
	// +optional
	Context Context `json:"context,omitempty"`
}

// LocalReference names a cluster-scoped object.
type LocalReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
}

// RoleReference names a Role, by name and namespace.
type RoleReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// Namespace of the Role: milo-system, the platform's (the default).
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// ServiceStatus is what the server observed about a Service.
type ServiceStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready is true when every resource the Service lists is
	// served by the platform (an Established CRD, or an available APIService).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServiceList is a list of Services.
// +kubebuilder:object:root=true
type ServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Service `json:"items"`
}

// ServiceActivation enables a Service in the project it is created in: the
// service's project resources are served there from then on. Its name is
// the Service's name. Deleting it disables the service: the project's
// objects of the service's resources are kept, hidden, and come back when
// the service is enabled again.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.serviceRef.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.serviceRef.name",message="a ServiceActivation is named after the Service it enables: metadata.name must equal spec.serviceRef.name"
type ServiceActivation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ServiceActivationSpec `json:"spec"`
}

// ServiceActivationSpec names the enabled service.
type ServiceActivationSpec struct {
	// ServiceRef names the Service; it cannot change.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serviceRef is immutable"
	// +required
	ServiceRef LocalReference `json:"serviceRef"`
}

// ServiceActivationList is a list of ServiceActivations.
// +kubebuilder:object:root=true
type ServiceActivationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceActivation `json:"items"`
}
