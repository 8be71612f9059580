// Package resourcemanager serves Milo's hierarchy API group,
// resourcemanager.miloapis.com (Organizations, Folders, Projects,
// OrganizationMemberships and ProjectSuspensions), from typed storage
// (package typedgroup). The Project, of which there is one per tenant, was
// the largest and slowest object of the server as a custom resource.
package resourcemanager

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/projectbootstrap"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
)

// Group is the hierarchy's group. Its one default, an Organization's type,
// is the scheme's.
var Group = &typedgroup.Group{
	Version:      v1alpha1.SchemeGroupVersion,
	Kinds:        kinds,
	AddToScheme:  v1alpha1.AddToScheme,
	Definitions:  v1alpha1.GetOpenAPIDefinitions,
	ModelPackage: "com.miloapis.resourcemanager.v1alpha1.",
	Defaults: func(scheme *runtime.Scheme) {
		scheme.AddTypeDefaultingFunc(&v1alpha1.Organization{}, func(obj any) { defaultOrganization(obj.(*v1alpha1.Organization)) })
	},
}

func init() {
	Group.Install(legacyscheme.Scheme)
}

// defaultOrganization: an Organization's type is Standard unless it says otherwise.
func defaultOrganization(o *v1alpha1.Organization) {
	if o.Spec.Type == "" {
		o.Spec.Type = v1alpha1.OrganizationTypeStandard
	}
}

// StorageProvider installs the group. built, when set, is handed each
// resource's storage, so that the server may read the hierarchy in-process
// (hierarchy.Tree). bootstrap, when set, is asked at each Project's create,
// its uid set, to have the project's bootstrap stored with it, and reports
// whether it will be: the Project is then created Ready, as the controllers
// would make it once they had bootstrapped it, so that it is usable at once
// and costs no further write.
func StorageProvider(built func(resource string, storage *typedgroup.REST), bootstrap func(context.Context, *v1alpha1.Project) bool) typedgroup.StorageProvider {
	p := typedgroup.StorageProvider{Group: Group, Built: built}
	if bootstrap != nil {
		p.PrepareForCreate = func(ctx context.Context, obj runtime.Object) {
			if project, ok := obj.(*v1alpha1.Project); ok && bootstrap(ctx, project) {
				readyAtCreate(project)
			}
		}
	}
	return p
}

// readyAtCreate sets a Project's status to what the controllers would write
// once its bootstrap is stored.
func readyAtCreate(p *v1alpha1.Project) {
	p.Status.ObservedGeneration = p.Generation
	p.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: p.Generation,
		LastTransitionTime: metav1.Now(), Reason: projectbootstrap.ReadyReason, Message: projectbootstrap.ReadyMessage}}
}
