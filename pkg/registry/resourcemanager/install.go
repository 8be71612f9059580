// Package resourcemanager serves Milo's hierarchy API group,
// resourcemanager.miloapis.com (Organizations, Folders, Projects,
// OrganizationMemberships and ProjectSuspensions), from typed storage, the way
// the apiserver serves its built-in kinds: Go types decoded from JSON,
// strategies and validation in Go, OpenAPI generated from the types.
//
// The kinds were custom resources before. A custom resource is held in the
// watch cache as a tree of maps and is decoded, coerced to its schema and
// validated by interpreting that schema on every write, which made the
// Project, of which there is one per tenant, the largest and slowest object
// of the server. The group, versions, kinds, fields, printer columns and
// validation messages are the custom resources' (their definitions are still
// generated from the same types), and the objects are stored as they were, as
// JSON under the same keys, so a data directory written by an earlier Milo is
// read as it is.
package resourcemanager

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

func init() {
	Install(legacyscheme.Scheme)
}

// Install registers the group's kinds with scheme: as their one served
// version, and as the internal version the apiserver's storage and admission
// work in. Both are the same Go types, so nothing is converted between them.
func Install(scheme *runtime.Scheme) {
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	internal := schema.GroupVersion{Group: v1alpha1.GroupName, Version: runtime.APIVersionInternal}
	for _, k := range kinds {
		scheme.AddKnownTypes(internal, k.new(), k.newList())
	}
	utilruntime.Must(scheme.SetVersionPriority(v1alpha1.SchemeGroupVersion))
	// Defaults are applied where a custom resource's were: as a request or
	// a stored object is decoded, before admission sees it.
	scheme.AddTypeDefaultingFunc(&v1alpha1.Organization{}, func(obj any) { defaultOrganization(obj.(*v1alpha1.Organization)) })
}

// defaultOrganization: an Organization's type is Standard unless it says otherwise.
func defaultOrganization(o *v1alpha1.Organization) {
	if o.Spec.Type == "" {
		o.Spec.Type = v1alpha1.OrganizationTypeStandard
	}
}
