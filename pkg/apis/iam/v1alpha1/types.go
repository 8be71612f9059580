package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionReady is true when an IAM object has been validated and is in effect.
const ConditionReady = "Ready"

// RoleReference names a Role, by name and namespace.
type RoleReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// Namespace of the Role: milo-system for platform roles, organization-{org}
	// for an organization's roles. Empty means the referring object's namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// LaunchStage says how mature a Role is.
// +kubebuilder:validation:Enum=EarlyAccess;Alpha;Beta;Stable;Deprecated
type LaunchStage string

// Role is a named set of permissions. Permissions are written
// {apiGroup}/{resource}.{verb}, with core for the core API group,
// e.g. core/configmaps.get or resourcemanager.miloapis.com/projects.create.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories=milo;iam
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Launch Stage",type=string,JSONPath=`.spec.launchStage`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Role struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RoleSpec   `json:"spec"`
	Status RoleStatus `json:"status,omitempty"`
}

// RoleSpec lists a Role's own permissions and the Roles whose permissions it includes.
type RoleSpec struct {
	// IncludedPermissions are granted directly by this Role.
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9.-]+|\*)/([a-z0-9-]+(/[a-z0-9-]+)?|\*)\.([a-z]+|\*)$`
	// +listType=set
	// +optional
	IncludedPermissions []string `json:"includedPermissions,omitempty"`
	// InheritedRoles contribute all their effective permissions to this Role. Cycles are refused.
	// +listType=atomic
	// +optional
	InheritedRoles []RoleReference `json:"inheritedRoles,omitempty"`
	// LaunchStage says how mature the Role is.
	// +optional
	LaunchStage LaunchStage `json:"launchStage,omitempty"`
}

// RoleStatus reports the flattened permissions of a Role.
type RoleStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// EffectivePermissions is the union of the Role's own and all inherited permissions.
	// +listType=set
	// +optional
	EffectivePermissions []string `json:"effectivePermissions,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RoleList is a list of Roles.
// +kubebuilder:object:root=true
type RoleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Role `json:"items"`
}

// SubjectKind is the kind of identity a PolicyBinding grants to.
// +kubebuilder:validation:Enum=User;Group;ServiceAccount
type SubjectKind string

// Subject is one identity a PolicyBinding grants its Role to.
type Subject struct {
	// Kind is User, Group or ServiceAccount.
	// +required
	Kind SubjectKind `json:"kind"`
	// Name of the User, Group or ServiceAccount.
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// Namespace of a Group or ServiceAccount.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// UID pins the subject to one incarnation: a re-created User of the same name does not inherit the grant.
	// +optional
	UID string `json:"uid,omitempty"`
}

// ResourceReference points at one object: an Organization, Folder, Project or any registered kind.
type ResourceReference struct {
	// APIGroup of the object's kind; empty for the core group.
	// +optional
	APIGroup string `json:"apiGroup"`
	// Kind of the object.
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// Namespace of a namespaced object.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Project the object lives in, for an object inside a project (a
	// ConfigMap of project web); empty for the platform's objects.
	// +optional
	Project string `json:"project,omitempty"`
	// UID pins the binding to one incarnation of the object.
	// +optional
	UID string `json:"uid,omitempty"`
}

// ResourceKind names a whole kind: a binding on it covers every object of that kind.
type ResourceKind struct {
	// APIGroup of the kind; empty for the core group.
	// +optional
	APIGroup string `json:"apiGroup"`
	// Kind, e.g. Project.
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`
}

// ResourceSelector picks what a PolicyBinding applies to: exactly one of resourceRef or resourceKind.
// +kubebuilder:validation:XValidation:rule="has(self.resourceRef) != has(self.resourceKind)",message="exactly one of resourceRef or resourceKind must be set"
type ResourceSelector struct {
	// ResourceRef is one object; the grant also reaches everything below it in the hierarchy.
	// +optional
	ResourceRef *ResourceReference `json:"resourceRef,omitempty"`
	// ResourceKind is every object of a kind.
	// +optional
	ResourceKind *ResourceKind `json:"resourceKind,omitempty"`
}

// PolicyBinding grants a Role's permissions to subjects on a resource or on a whole kind.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories=milo;iam
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.roleRef.name`
// +kubebuilder:printcolumn:name="Resource Kind",type=string,JSONPath=`.spec.resourceSelector.resourceRef.kind`
// +kubebuilder:printcolumn:name="Resource",type=string,JSONPath=`.spec.resourceSelector.resourceRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PolicyBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PolicyBindingSpec   `json:"spec"`
	Status PolicyBindingStatus `json:"status,omitempty"`
}

// PolicyBindingSpec says which Role is granted to whom, on what.
type PolicyBindingSpec struct {
	// RoleRef is the Role granted.
	// +required
	RoleRef RoleReference `json:"roleRef"`
	// Subjects receive the Role.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	// +required
	Subjects []Subject `json:"subjects"`
	// ResourceSelector is what the grant applies to.
	// +required
	ResourceSelector ResourceSelector `json:"resourceSelector"`
}

// PolicyBindingStatus reports whether a binding is in effect.
type PolicyBindingStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PolicyBindingList is a list of PolicyBindings.
// +kubebuilder:object:root=true
type PolicyBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PolicyBinding `json:"items"`
}

// User is a person known to the platform, created on their first authenticated
// request or by an operator.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo;iam
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Email",type=string,JSONPath=`.spec.email`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type User struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   UserSpec   `json:"spec"`
	Status UserStatus `json:"status,omitempty"`
}

// UserSpec describes a person.
type UserSpec struct {
	// Email is the person's e-mail address. Users recorded on their first
	// request have it when their user name is one (OIDC with the email claim).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=254
	// +kubebuilder:validation:Pattern=`^[^@\s]+@[^@\s]+$`
	// +optional
	Email string `json:"email,omitempty"`
	// +optional
	GivenName string `json:"givenName,omitempty"`
	// +optional
	FamilyName string `json:"familyName,omitempty"`
}

// UserStatus is what the server observed about a User.
type UserStatus struct {
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// UserList is a list of Users.
// +kubebuilder:object:root=true
type UserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []User `json:"items"`
}

// Group is a set of Users in an organization, filled by GroupMemberships.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories=milo;iam
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Group struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status GroupStatus `json:"status,omitempty"`
}

// GroupStatus is what the server observed about a Group.
type GroupStatus struct {
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GroupList is a list of Groups.
// +kubebuilder:object:root=true
type GroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Group `json:"items"`
}

// GroupReference names a Group.
type GroupReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	// +required
	Namespace string `json:"namespace"`
}

// UserReference names a User.
type UserReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
}

// GroupMembership puts one User into one Group.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories=milo;iam
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.groupRef.name`
// +kubebuilder:printcolumn:name="User",type=string,JSONPath=`.spec.userRef.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GroupMembership struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GroupMembershipSpec   `json:"spec"`
	Status GroupMembershipStatus `json:"status,omitempty"`
}

// GroupMembershipSpec names the Group and the User.
type GroupMembershipSpec struct {
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="groupRef is immutable"
	// +required
	GroupRef GroupReference `json:"groupRef"`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="userRef is immutable"
	// +required
	UserRef UserReference `json:"userRef"`
}

// GroupMembershipStatus is what the server observed about a GroupMembership.
type GroupMembershipStatus struct {
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GroupMembershipList is a list of GroupMemberships.
// +kubebuilder:object:root=true
type GroupMembershipList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GroupMembership `json:"items"`
}

// ServiceAccountState says whether a ServiceAccount may authenticate.
// +kubebuilder:validation:Enum=Active;Inactive
type ServiceAccountState string

// ServiceAccount is a machine identity of a project.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories=milo;iam
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.spec.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceAccount struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	// +optional
	Spec   ServiceAccountSpec   `json:"spec,omitempty"`
	Status ServiceAccountStatus `json:"status,omitempty"`
}

// ServiceAccountSpec says whether the account is usable.
type ServiceAccountSpec struct {
	// State is Active (default) or Inactive.
	// +kubebuilder:default=Active
	// +optional
	State ServiceAccountState `json:"state,omitempty"`
}

// ServiceAccountStatus is what the server observed about a ServiceAccount.
type ServiceAccountStatus struct {
	// Email is the account's identity as it appears in policy bindings and audit logs.
	// +optional
	Email string `json:"email,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServiceAccountList is a list of ServiceAccounts.
// +kubebuilder:object:root=true
type ServiceAccountList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceAccount `json:"items"`
}

// ServiceReference names the service that registers a ProtectedResource.
type ServiceReference struct {
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
}

// ParentResource is a kind under which a protected kind's objects live in the hierarchy.
type ParentResource struct {
	// +optional
	APIGroup string `json:"apiGroup"`
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`
}

// ProtectedResource registers a kind with IAM: the permissions that exist for it and
// the kinds it lives under, through which grants are inherited.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=milo;iam
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.serviceRef.name`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.kind`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProtectedResource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProtectedResourceSpec   `json:"spec"`
	Status ProtectedResourceStatus `json:"status,omitempty"`
}

// ProtectedResourceSpec describes the protected kind.
type ProtectedResourceSpec struct {
	// ServiceRef is the service that owns the kind's API group.
	// +required
	ServiceRef ServiceReference `json:"serviceRef"`
	// Kind, Plural and Singular name the kind as its API does.
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`
	// +kubebuilder:validation:MinLength=1
	// +required
	Plural string `json:"plural"`
	// +kubebuilder:validation:MinLength=1
	// +required
	Singular string `json:"singular"`
	// Permissions are the verbs that can be granted on the kind, e.g. get, list, create.
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	// +required
	Permissions []string `json:"permissions"`
	// ParentResources are the kinds the protected kind lives under.
	// +listType=atomic
	// +optional
	ParentResources []ParentResource `json:"parentResources,omitempty"`
}

// ProtectedResourceStatus is what the server observed about a ProtectedResource.
type ProtectedResourceStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProtectedResourceList is a list of ProtectedResources.
// +kubebuilder:object:root=true
type ProtectedResourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProtectedResource `json:"items"`
}
