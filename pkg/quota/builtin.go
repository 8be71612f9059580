package quota

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
)

// The resource types Milo registers at start-up.
const (
	// ProjectsPerOrganization counts an organization's Projects.
	ProjectsPerOrganization = "resourcemanager.miloapis.com/projects"
	// NamespacesPerProject counts a project's Namespaces.
	NamespacesPerProject = "core/namespaces"
	// ObjectsPerProject counts the objects a project stores, of every kind
	// (Events, which expire on their own, aside).
	ObjectsPerProject = "storage.miloapis.com/objects"
	// BytesPerProject counts the bytes a project's objects take in storage.
	BytesPerProject = "storage.miloapis.com/bytes"
)

// storageMetered are the resource types the storage layer meters
// (StorageMeter): claim policies do not charge them.
var storageMetered = map[string]bool{ObjectsPerProject: true, BytesPerProject: true}

// StorageMetered reports whether the storage layer meters resource type t.
func StorageMetered(t string) bool { return storageMetered[t] }

// AnyKind, as a registration's claiming kind, stands for every kind: what
// the storage-metered built-ins count.
const AnyKind = "*"

// BuiltIns are the registrations and claim policies the server creates
// where missing: a provider limits projects per organization, namespaces,
// objects or stored bytes per project with a grant alone, no CEL written.
func BuiltIns() ([]quotav1alpha1.ResourceRegistration, []quotav1alpha1.ClaimCreationPolicy) {
	reg := func(name, resourceType, consumer, unit, description string, claiming quotav1alpha1.ClaimingResource) quotav1alpha1.ResourceRegistration {
		r := quotav1alpha1.ResourceRegistration{
			TypeMeta:   metav1.TypeMeta{APIVersion: quotav1alpha1.SchemeGroupVersion.String(), Kind: "ResourceRegistration"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{BuiltInLabel: "true"}},
			Spec: quotav1alpha1.ResourceRegistrationSpec{ConsumerType: quotav1alpha1.ConsumerType{APIGroup: ConsumerGroup, Kind: consumer},
				Type: quotav1alpha1.TypeEntity, ResourceType: resourceType, Description: description, BaseUnit: unit, DisplayUnit: unit,
				UnitConversionFactor: 1, ClaimingResources: []quotav1alpha1.ClaimingResource{claiming}},
		}
		return r
	}
	bytes := reg("stored-bytes-per-project", BytesPerProject, KindProject, "byte", "Bytes a project's objects take in storage",
		quotav1alpha1.ClaimingResource{Kind: AnyKind})
	bytes.Spec.Type, bytes.Spec.DisplayUnit, bytes.Spec.UnitConversionFactor = quotav1alpha1.TypeAllocation, "MiB", 1<<20
	policy := func(name, apiVersion, kind, consumer, resourceType string) quotav1alpha1.ClaimCreationPolicy {
		return quotav1alpha1.ClaimCreationPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: quotav1alpha1.SchemeGroupVersion.String(), Kind: "ClaimCreationPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{BuiltInLabel: "true"}},
			Spec: quotav1alpha1.ClaimCreationPolicySpec{
				Trigger: quotav1alpha1.ClaimTriggerSpec{Resource: quotav1alpha1.ClaimTriggerResource{APIVersion: apiVersion, Kind: kind}},
				Target: quotav1alpha1.ClaimTargetSpec{ResourceClaimTemplate: quotav1alpha1.ResourceClaimTemplate{
					Spec: quotav1alpha1.ResourceClaimSpec{ConsumerRef: quotav1alpha1.ConsumerRef{APIGroup: ConsumerGroup, Kind: consumer},
						Requests: []quotav1alpha1.ResourceRequest{{ResourceType: resourceType, Amount: 1}}}}},
			},
		}
	}
	return []quotav1alpha1.ResourceRegistration{
			reg("projects-per-organization", ProjectsPerOrganization, KindOrganization, "project", "Projects in an organization",
				quotav1alpha1.ClaimingResource{APIGroup: ConsumerGroup, Kind: KindProject}),
			reg("namespaces-per-project", NamespacesPerProject, KindProject, "namespace", "Namespaces in a project",
				quotav1alpha1.ClaimingResource{Kind: "Namespace"}),
			reg("objects-per-project", ObjectsPerProject, KindProject, "object", "Objects a project stores, of every kind but Events",
				quotav1alpha1.ClaimingResource{Kind: AnyKind}),
			bytes,
		}, []quotav1alpha1.ClaimCreationPolicy{
			policy("projects-per-organization", ConsumerGroup+"/v1alpha1", KindProject, KindOrganization, ProjectsPerOrganization),
			policy("namespaces-per-project", "v1", "Namespace", KindProject, NamespacesPerProject),
		}
}

// BuiltInLabel marks the registrations and policies Milo bootstraps.
const BuiltInLabel = "quota.miloapis.com/built-in"
