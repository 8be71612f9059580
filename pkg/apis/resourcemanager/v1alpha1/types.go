package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OrganizationNameLabel names, on Folders and Projects, the Organization they belong to.
// The server sets it; clients cannot choose or change it.
const OrganizationNameLabel = "resourcemanager.miloapis.com/organization-name"

// Condition types used by the hierarchy kinds.
const (
	// ConditionReady is true when the object is fully set up and usable.
	ConditionReady = "Ready"
	// ConditionResourceCleanup reports the progress of deleting a project's contents.
	ConditionResourceCleanup = "ResourceCleanup"
)

// OrganizationType distinguishes an individual's organization from a company's.
// +enum
// +kubebuilder:validation:Enum=Personal;Standard
type OrganizationType string

const (
	// OrganizationTypePersonal is an organization that belongs to one person.
	OrganizationTypePersonal OrganizationType = "Personal"
	// OrganizationTypeStandard is an organization shared by a team or company.
	OrganizationTypeStandard OrganizationType = "Standard"
)

// Organization is the root of a customer's resource hierarchy. It owns the
// namespace organization-{name}, where its memberships, groups and roles live.
//
// The name is a DNS label of at most 50 characters, so that organization-{name}
// is itself a valid namespace name.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 50",message="organization names are at most 50 characters"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="organization names are DNS labels: lower-case letters, digits and '-', starting and ending with a letter or digit"
type Organization struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// +kubebuilder:default={}
	// +default={}
	// +optional
	Spec   OrganizationSpec   `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	Status OrganizationStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// OrganizationSpec is what the owner of an Organization chooses.
type OrganizationSpec struct {
	// Type is Personal or Standard. It cannot change after creation.
	// +kubebuilder:default=Standard
	// +default="Standard"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="type is immutable"
	// +optional
	Type OrganizationType `json:"type,omitempty" protobuf:"bytes,1,opt,name=type,casttype=OrganizationType"`
}

// OrganizationStatus is what the server observed about an Organization.
type OrganizationStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Conditions: Ready is true once the organization's namespace exists;
	// ResourceCleanup, while it is being deleted, says what the deletion waits for.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
}

// OrganizationList is a list of Organizations.
// +kubebuilder:object:root=true
type OrganizationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []Organization `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// ParentKind is the kind of the object a Folder or Project hangs under.
// +enum
// +kubebuilder:validation:Enum=Organization;Folder
type ParentKind string

const (
	// ParentKindOrganization places the object directly under an Organization.
	ParentKindOrganization ParentKind = "Organization"
	// ParentKindFolder places the object under a Folder.
	ParentKindFolder ParentKind = "Folder"
)

// ParentReference points at an Organization or a Folder by name.
type ParentReference struct {
	// Kind is Organization or Folder.
	// +required
	Kind ParentKind `json:"kind" protobuf:"bytes,1,opt,name=kind,casttype=ParentKind"`
	// Name of the Organization or Folder.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name" protobuf:"bytes,2,opt,name=name"`
}

// Folder groups Projects and other Folders inside one Organization. Access granted
// on a Folder reaches everything below it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Parent Kind",type=string,JSONPath=`.spec.parentRef.kind`
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parentRef.name`
// +kubebuilder:printcolumn:name="Organization",type=string,JSONPath=`.metadata.labels.resourcemanager\.miloapis\.com/organization-name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="folder names are DNS labels: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
type Folder struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   FolderSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status FolderStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// FolderSpec places a Folder in the hierarchy.
type FolderSpec struct {
	// ParentRef is the Organization or Folder this Folder lives in. It may change to
	// another parent in the same Organization (a move); cycles are refused.
	// +required
	ParentRef ParentReference `json:"parentRef" protobuf:"bytes,1,opt,name=parentRef"`
}

// FolderStatus is what the server observed about a Folder.
type FolderStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Conditions: Ready is true when the parent chain up to the Organization is valid;
	// ResourceCleanup, while it is being deleted, says what the deletion waits for.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
}

// FolderList is a list of Folders.
// +kubebuilder:object:root=true
type FolderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []Folder `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// Project is one isolated, Kubernetes-compatible control plane. Its contents are
// served under /apis/resourcemanager.miloapis.com/v1alpha1/projects/{name}/control-plane.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Owner Kind",type=string,JSONPath=`.spec.ownerRef.kind`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.ownerRef.name`
// +kubebuilder:printcolumn:name="Organization",type=string,JSONPath=`.metadata.labels.resourcemanager\.miloapis\.com/organization-name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="project names are DNS labels: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
type Project struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   ProjectSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status ProjectStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ProjectSpec places a Project in the hierarchy.
type ProjectSpec struct {
	// OwnerRef is the Organization or Folder that owns this Project.
	// +required
	OwnerRef ParentReference `json:"ownerRef" protobuf:"bytes,1,opt,name=ownerRef"`
}

// ProjectStatus is what the server observed about a Project.
type ProjectStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Conditions: Ready (the control plane is initialized) and, while the project is
	// being deleted, ResourceCleanup with the progress of the cleanup.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
}

// ProjectList is a list of Projects.
// +kubebuilder:object:root=true
type ProjectList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []Project `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// OrganizationReference names an Organization.
type OrganizationReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
}

// UserReference names a User.
type UserReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
}

// RoleReference names an iam.miloapis.com Role.
type RoleReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// Namespace of the Role: milo-system for platform roles, organization-{org}
	// for the organization's own roles. Empty means the membership's namespace.
	// +optional
	Namespace string `json:"namespace,omitempty" protobuf:"bytes,2,opt,name=namespace"`
}

// OrganizationMembership makes a User a member of an Organization with some roles.
// It lives in the namespace organization-{org}.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories=milo
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Organization",type=string,JSONPath=`.spec.organizationRef.name`
// +kubebuilder:printcolumn:name="User",type=string,JSONPath=`.spec.userRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OrganizationMembership struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Spec   OrganizationMembershipSpec   `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	Status OrganizationMembershipStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// OrganizationMembershipSpec says who is a member of which Organization, with which roles.
type OrganizationMembershipSpec struct {
	// OrganizationRef is the Organization; it cannot change.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="organizationRef is immutable"
	// +required
	OrganizationRef OrganizationReference `json:"organizationRef" protobuf:"bytes,1,opt,name=organizationRef"`
	// UserRef is the member; it cannot change.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="userRef is immutable"
	// +required
	UserRef UserReference `json:"userRef" protobuf:"bytes,2,opt,name=userRef"`
	// Roles granted to the member on the Organization; each becomes a PolicyBinding.
	// +listType=atomic
	// +optional
	Roles []RoleReference `json:"roles,omitempty" protobuf:"bytes,3,rep,name=roles"`
}

// AppliedRole reports one role of a membership and the binding that grants it.
type AppliedRole struct {
	// Name and Namespace of the Role.
	Name      string `json:"name" protobuf:"bytes,1,opt,name=name"`
	Namespace string `json:"namespace,omitempty" protobuf:"bytes,2,opt,name=namespace"`
	// PolicyBindingName is the PolicyBinding created for this role, once it exists.
	// +optional
	PolicyBindingName string `json:"policyBindingName,omitempty" protobuf:"bytes,3,opt,name=policyBindingName"`
	// Status is Applied or Pending; Message explains Pending.
	// +kubebuilder:validation:Enum=Applied;Pending
	// +optional
	Status string `json:"status,omitempty" protobuf:"bytes,4,opt,name=status"`
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,5,opt,name=message"`
}

// OrganizationMembershipStatus is what the server observed about a membership.
type OrganizationMembershipStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// AppliedRoles lists each role and whether its PolicyBinding is in place.
	// +listType=atomic
	// +optional
	AppliedRoles []AppliedRole `json:"appliedRoles,omitempty" protobuf:"bytes,2,rep,name=appliedRoles"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,3,rep,name=conditions"`
}

// OrganizationMembershipList is a list of OrganizationMemberships.
// +kubebuilder:object:root=true
type OrganizationMembershipList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []OrganizationMembership `json:"items" protobuf:"bytes,2,rep,name=items"`
}
