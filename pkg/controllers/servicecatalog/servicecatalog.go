// Package servicecatalog reports, on every Service, whether the platform
// serves what it lists: its Ready condition is true when each resource it
// lists is served by an Established CRD of the platform (or, for a group an
// aggregated APIService serves, when that APIService is Available), each
// ProtectedResource it names exists, and each default Role it offers exists
// among the platform's Roles (milo-system), which every consumer may bind.
//
// Services, CRDs, APIServices, ProtectedResources and the platform's Roles
// are the platform's and few: one informer each, and a change to any CRD,
// APIService, ProtectedResource or platform Role requeues every Service.
package servicecatalog

import (
	"context"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	iamv1alpha1 "go.miloapis.com/milo/pkg/apis/iam/v1alpha1"
	servicesv1alpha1 "go.miloapis.com/milo/pkg/apis/services/v1alpha1"
	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/manager"
	"go.miloapis.com/milo/pkg/iam/evaluator"
)

// Name is the controller's name in the registry of controllers.
const Name = "service-catalog"

// Controller keeps Services' Ready conditions.
type Controller struct {
	clients *allprojects.Clients
}

// New returns the controller; it reaches the platform through clients.
func New(clients *allprojects.Clients) *Controller { return &Controller{clients: clients} }

var (
	apiServicesResource        = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	protectedResourcesResource = iamv1alpha1.SchemeGroupVersion.WithResource("protectedresources")
	rolesResource              = iamv1alpha1.SchemeGroupVersion.WithResource("roles")
)

type term struct {
	client                                         dynamic.Interface
	services, crds, apiServices, protecteds, roles cache.SharedIndexInformer
}

// Run works until ctx ends.
func (ctl *Controller) Run(ctx context.Context, workers int) {
	client, err := dynamic.NewForConfigAndClient(ctl.clients.Config(""), ctl.clients.HTTPClient())
	var crds cache.SharedIndexInformer
	if err == nil {
		crds, err = ctl.clients.Informer(allprojects.CRDREST, "customresourcedefinitions", &apiextensionsv1.CustomResourceDefinition{}, false, nil, namesAndConditions)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Preparing informers", "controller", Name)
		return
	}
	informer := func(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
		return dynamicinformer.NewFilteredDynamicInformer(client, gvr, "", 0, cache.Indexers{}, nil).Informer()
	}
	t := &term{client: client, services: informer(servicesv1alpha1.ServicesResource), crds: crds,
		apiServices: informer(apiServicesResource), protecteds: informer(protectedResourcesResource),
		roles: dynamicinformer.NewFilteredDynamicInformer(client, rolesResource, evaluator.PlatformNamespace, 0, cache.Indexers{}, nil).Informer()}
	queue := manager.NewQueue[string](Name)
	defer queue.ShutDown()
	one := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	all := func(any) {
		for _, key := range t.services.GetStore().ListKeys() {
			queue.Add(key)
		}
	}
	if !manager.StartInformers(ctx, Name, nil, t.crds, t.apiServices, t.protecteds, t.roles) ||
		!manager.StartInformers(ctx, Name, cache.ResourceEventHandlerFuncs{AddFunc: one, UpdateFunc: func(_, o any) { one(o) }}, t.services) {
		return
	}
	// Registered once the Services are known: a change of what serves them
	// requeues them all.
	for _, inf := range []cache.SharedIndexInformer{t.crds, t.apiServices, t.protecteds, t.roles} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: all, UpdateFunc: func(_, o any) { all(o) }, DeleteFunc: all}); err != nil {
			klog.FromContext(ctx).Error(err, "Registering event handler", "controller", Name)
			return
		}
	}
	manager.Work(ctx, Name, queue, workers, t.sync)
}

// namesAndConditions keeps of a platform CRD what the controller decides on.
func namesAndConditions(obj any) (any, error) {
	if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
		return &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.Name, ResourceVersion: crd.ResourceVersion},
			Spec:   apiextensionsv1.CustomResourceDefinitionSpec{Group: crd.Spec.Group, Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: crd.Spec.Names.Plural}},
			Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: crd.Status.Conditions}}, nil
	}
	return obj, nil
}

// sync writes the Ready condition of one Service.
func (t *term) sync(ctx context.Context, name string) error {
	obj, exists, err := t.services.GetStore().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	u := obj.(*unstructured.Unstructured)
	svc := &servicesv1alpha1.Service{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, svc); err != nil {
		return err
	}
	cond := metav1.Condition{Type: servicesv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Served",
		Message: "every resource the service lists is served", ObservedGeneration: svc.Generation}
	if missing := t.unserved(svc); len(missing) > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, "ResourcesNotServed"
		cond.Message = "not served by the platform: " + strings.Join(missing, ", ")
	} else if missing := t.unregistered(svc); len(missing) > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, "ProtectedResourcesMissing"
		cond.Message = "no such ProtectedResource: " + strings.Join(missing, ", ")
	} else if missing := t.unoffered(svc); len(missing) > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, "DefaultRolesMissing"
		cond.Message = "no such Role: " + strings.Join(missing, ", ")
	}
	status := *svc.Status.DeepCopy()
	status.ObservedGeneration = svc.Generation
	meta.SetStatusCondition(&status.Conditions, cond)
	if equality.Semantic.DeepEqual(status, svc.Status) {
		return nil
	}
	svc.Status = status
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(svc)
	if err != nil {
		return err
	}
	_, err = t.client.Resource(servicesv1alpha1.ServicesResource).UpdateStatus(ctx, &unstructured.Unstructured{Object: out}, metav1.UpdateOptions{FieldManager: Name})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // the newer version is queued, or it is gone
	}
	return err
}

// unserved lists the resources of svc the platform does not serve.
func (t *term) unserved(svc *servicesv1alpha1.Service) []string {
	served := map[schema.GroupResource]bool{}
	for _, obj := range t.crds.GetStore().List() {
		crd := obj.(*apiextensionsv1.CustomResourceDefinition)
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				served[schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}] = true
			}
		}
	}
	available := map[string]bool{}
	for _, obj := range t.apiServices.GetStore().List() {
		u := obj.(*unstructured.Unstructured)
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conditions {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" && m["status"] == "True" {
				available[group] = true
			}
		}
	}
	var missing []string
	for _, r := range svc.Spec.Resources {
		gr := schema.GroupResource{Group: r.Group, Resource: r.Resource}
		if !served[gr] && !available[r.Group] {
			missing = append(missing, gr.String())
		}
	}
	return missing
}

// unregistered lists the ProtectedResources svc names that do not exist.
func (t *term) unregistered(svc *servicesv1alpha1.Service) []string {
	var missing []string
	for _, p := range svc.Spec.ProtectedResources {
		if _, exists, _ := t.protecteds.GetStore().GetByKey(p.Name); !exists {
			missing = append(missing, fmt.Sprintf("%q", p.Name))
		}
	}
	return missing
}

// unoffered lists the default Roles svc offers that do not exist.
func (t *term) unoffered(svc *servicesv1alpha1.Service) []string {
	var missing []string
	for _, r := range svc.Spec.DefaultRoles {
		ns := r.Namespace
		if ns == "" { // stored before admission named the platform's namespace
			ns = evaluator.PlatformNamespace
		}
		if _, exists, _ := t.roles.GetStore().GetByKey(ns + "/" + r.Name); !exists {
			missing = append(missing, ns+"/"+r.Name)
		}
	}
	return missing
}
