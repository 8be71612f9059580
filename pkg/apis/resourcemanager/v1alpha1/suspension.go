package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProjectSuspensionReason is why a project is suspended.
// +enum
// +kubebuilder:validation:Enum=Abuse;Billing;Compliance;Administrative
type ProjectSuspensionReason string

// Reasons for a suspension.
const (
	ReasonAbuse          ProjectSuspensionReason = "Abuse"
	ReasonBilling        ProjectSuspensionReason = "Billing"
	ReasonCompliance     ProjectSuspensionReason = "Compliance"
	ReasonAdministrative ProjectSuspensionReason = "Administrative"
)

// ProjectSuspensionReinstateAuthority is who may lift a suspension.
// +enum
// +kubebuilder:validation:Enum=Operator;Consumer
type ProjectSuspensionReinstateAuthority string

// Who may lift a suspension: the platform's operators only, or also the
// owners of the project's organization.
const (
	AuthorityOperator ProjectSuspensionReinstateAuthority = "Operator"
	AuthorityConsumer ProjectSuspensionReinstateAuthority = "Consumer"
)

// ProjectSuspensionPhase is whether a suspension is in effect.
// +enum
// +kubebuilder:validation:Enum=Active;Lifted
type ProjectSuspensionPhase string

// Phases of a suspension.
const (
	SuspensionActive ProjectSuspensionPhase = "Active"
	SuspensionLifted ProjectSuspensionPhase = "Lifted"
)

// ProjectReference names a Project.
type ProjectReference struct {
	// +kubebuilder:validation:Required
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
}

// ProjectSuspensionSpec is which project is suspended, why and by whom.
type ProjectSuspensionSpec struct {
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="projectRef is immutable"
	ProjectRef ProjectReference `json:"projectRef" protobuf:"bytes,1,opt,name=projectRef"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="reason is immutable"
	Reason ProjectSuspensionReason `json:"reason" protobuf:"bytes,2,opt,name=reason,casttype=ProjectSuspensionReason"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="reinstateAuthority is immutable"
	ReinstateAuthority ProjectSuspensionReinstateAuthority `json:"reinstateAuthority" protobuf:"bytes,3,opt,name=reinstateAuthority,casttype=ProjectSuspensionReinstateAuthority"`
	// RequestedBy names the operator or system that asked for it.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="requestedBy is immutable"
	RequestedBy string `json:"requestedBy" protobuf:"bytes,4,opt,name=requestedBy"`
	// +optional
	Description string `json:"description,omitempty" protobuf:"bytes,5,opt,name=description"`
}

// ProjectSuspensionStatus is whether the suspension is in effect.
type ProjectSuspensionStatus struct {
	// +optional
	Phase ProjectSuspensionPhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=ProjectSuspensionPhase"`
}

// ProjectSuspension suspends a project: while it exists, the project's
// control plane refuses creates and updates (403 naming the suspension);
// reads and deletes work. Deleting it lifts the suspension at once.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef.name`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProjectSuspension struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// +kubebuilder:validation:Required
	Spec   ProjectSuspensionSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status ProjectSuspensionStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ProjectSuspensionList is a list of ProjectSuspensions.
// +kubebuilder:object:root=true
type ProjectSuspensionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []ProjectSuspension `json:"items" protobuf:"bytes,2,rep,name=items"`
}
