package catalog

import (
	"context"
	"fmt"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/tools/cache"

	servicesv1alpha1 "go.miloapis.com/milo/pkg/apis/services/v1alpha1"
	"go.miloapis.com/milo/pkg/tenancy"
)

// catalogOf builds a catalog from Services, platform CRDs (group/plural) and
// enablements (project storage id → service), as its informers would feed it.
func catalogOf(t testing.TB, services []servicesv1alpha1.Service, crds [][2]string, enabled map[string]string) *Catalog {
	t.Helper()
	c := &Catalog{services: cache.NewStore(cache.MetaNamespaceKeyFunc), crds: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	for i := range services {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&services[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := c.services.Add(&unstructured.Unstructured{Object: obj}); err != nil {
			t.Fatal(err)
		}
	}
	for _, gr := range crds {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: gr[1] + "." + gr[0]},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: gr[0], Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: gr[1]}}}
		if err := c.crds.Add(crd); err != nil {
			t.Fatal(err)
		}
	}
	c.build()
	for project, service := range enabled {
		c.activation(activationOf(project, service, "uid-"+service), true)
	}
	c.synced.Store(true)
	return c
}

// activationOf is a ServiceActivation of project, made for the Service of
// uid, as the all-projects metadata informer stores it.
func activationOf(project, service, uid string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: service, ResourceVersion: "7", Labels: map[string]string{"x": "y"},
		Annotations: map[string]string{tenancy.AnnotationKey: "name-of-" + project, tenancy.IDAnnotationKey: project, ServiceUIDAnnotation: uid, "other": "dropped"}}}
	obj, _ := SlimActivation(m)
	return obj.(*metav1.PartialObjectMetadata)
}

func service(name string, phase servicesv1alpha1.Phase, resources ...servicesv1alpha1.ServiceResource) servicesv1alpha1.Service {
	return servicesv1alpha1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: servicesv1alpha1.ServiceSpec{DisplayName: name, Phase: phase, Resources: resources}}
}

// offering is a Draft Service offering one default Role of namespace.
func offering(name, namespace string) servicesv1alpha1.Service {
	s := service(name, servicesv1alpha1.Draft)
	s.Spec.DefaultRoles = []servicesv1alpha1.RoleReference{{Name: "editor", Namespace: namespace}}
	return s
}

func resource(group, plural string, ctx servicesv1alpha1.Context) servicesv1alpha1.ServiceResource {
	return servicesv1alpha1.ServiceResource{Group: group, Resource: plural, Context: ctx}
}

var (
	widgets  = schema.GroupResource{Group: "widgets.example.com", Resource: "widgets"}
	gizmos   = schema.GroupResource{Group: "widgets.example.com", Resource: "gizmos"}
	tenants  = schema.GroupResource{Group: "widgets.example.com", Resource: "tenants"}
	billing  = schema.GroupResource{Group: "billing.example.com", Resource: "accounts"}
	ungated  = schema.GroupResource{Group: "free.example.com", Resource: "things"}
	enabling = tenancy.Tenant{Kind: tenancy.Project, Name: "a", ID: "id-a"}
	other    = tenancy.Tenant{Kind: tenancy.Project, Name: "b", ID: "id-b"}
	recycled = tenancy.Tenant{Kind: tenancy.Project, Name: "a", ID: "id-a2"}
	org      = tenancy.OrganizationTenant("acme")
)

func TestWhereResourcesAreServed(t *testing.T) {
	c := catalogOf(t, []servicesv1alpha1.Service{
		service("widgets", servicesv1alpha1.Published,
			resource(widgets.Group, widgets.Resource, servicesv1alpha1.ContextProject),
			resource(tenants.Group, tenants.Resource, servicesv1alpha1.ContextOrganization)),
		service("billing", servicesv1alpha1.Draft, resource(billing.Group, billing.Resource, servicesv1alpha1.ContextOrganization)),
	}, [][2]string{{"widgets.example.com", "widgets"}, {"widgets.example.com", "gizmos"}, {"widgets.example.com", "tenants"}}, map[string]string{"id-a": "widgets"})

	for _, tc := range []struct {
		what   string
		tenant tenancy.Tenant
		gr     schema.GroupResource
		served bool
	}{
		{"a project resource in the project that enabled it", enabling, widgets, true},
		{"a project resource in another project", other, widgets, false},
		{"a project resource in a later project of the same name", recycled, widgets, false},
		{"a project resource in an organization's context", org, widgets, false},
		{"a project resource at the platform", tenancy.PlatformTenant, widgets, true},
		{"a project resource in the all-projects view (narrowed per project)", tenancy.AllProjectsTenant, widgets, true},
		{"an organization resource in a project that enabled its service", enabling, tenants, false},
		{"an organization resource in an organization's context", org, tenants, true},
		{"an organization resource of a Draft service", org, billing, false},
		{"a resource of the group no Service lists", other, gizmos, true},
		{"a resource no Service lists", other, ungated, true},
	} {
		if got := c.Served(tc.tenant, tc.gr); got != tc.served {
			t.Errorf("%s: served %v, want %v", tc.what, got, tc.served)
		}
	}

	// A group is hidden only when Services hide every resource of it.
	if c.GroupHidden(other, widgets.Group) {
		t.Error("widgets.example.com hidden from a project although gizmos, which no Service lists, is served there")
	}
	if !c.GroupHidden(other, billing.Group) || c.GroupHidden(tenancy.PlatformTenant, billing.Group) {
		t.Error("billing.example.com: hidden from projects and served at the platform, want both")
	}
	if c.GroupHidden(other, ungated.Group) {
		t.Error("a group no Service lists is hidden")
	}

	if !c.Listed("widgets") || c.Listed("billing") || c.Listed("missing") {
		t.Error("the catalog lists Published and Deprecated services only")
	}

	shown := c.ProjectsShown(widgets)
	if shown == nil || !shown("id-a") || shown("id-b") {
		t.Error("the all-projects view shows the widgets of the enabling project only")
	}
	if c.ProjectsShown(ungated) != nil {
		t.Error("the all-projects view narrows a resource no Service lists")
	}
	if s := c.ProjectsShown(tenants); s == nil || s("id-a") {
		t.Error("the all-projects view shows an organization resource")
	}

	// Disabling forgets the enablement; nothing else is kept per project.
	c.activation(cache.DeletedFinalStateUnknown{Obj: activationOf("id-a", "widgets", "uid-widgets")}, false)
	if c.Served(enabling, widgets) || c.Enablements() != 0 {
		t.Errorf("widgets served after the project disabled the service (%d enablements left)", c.Enablements())
	}
}

func TestAdmission(t *testing.T) {
	c := catalogOf(t, []servicesv1alpha1.Service{
		service("widgets", servicesv1alpha1.Published, resource(widgets.Group, widgets.Resource, servicesv1alpha1.ContextProject)),
		service("draft", servicesv1alpha1.Draft),
		service("old", servicesv1alpha1.Deprecated),
		service("gone", servicesv1alpha1.Retired),
	}, nil, nil)
	p := &plugin{Handler: admission.NewHandler(admission.Create, admission.Update), catalog: c}
	projectCtx := tenancy.WithTenant(context.Background(), enabling)

	attrs := func(gr schema.GroupResource, obj runtime.Object, name string) admission.Attributes {
		return admission.NewAttributesRecord(obj, nil, servicesv1alpha1.SchemeGroupVersion.WithKind("x"), "", name,
			servicesv1alpha1.SchemeGroupVersion.WithResource(gr.Resource), "", admission.Create, nil, false, nil)
	}
	serviceObj := func(s servicesv1alpha1.Service) runtime.Object {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: obj}
	}
	activation := func(name string) runtime.Object {
		return &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": name},
			"spec": map[string]any{"serviceRef": map[string]any{"name": name}}}}
	}

	for _, tc := range []struct {
		what    string
		ctx     context.Context
		gr      schema.GroupResource
		obj     runtime.Object
		name    string
		invalid bool
	}{
		{"a Service listing a free resource", context.Background(), tenancy.Catalog,
			serviceObj(service("gizmos", servicesv1alpha1.Draft, resource(gizmos.Group, gizmos.Resource, ""))), "gizmos", false},
		{"a Service listing another's resource", context.Background(), tenancy.Catalog,
			serviceObj(service("thief", servicesv1alpha1.Draft, resource(widgets.Group, widgets.Resource, ""))), "thief", true},
		{"a Service updating its own resources", context.Background(), tenancy.Catalog,
			serviceObj(service("widgets", servicesv1alpha1.Published, resource(widgets.Group, widgets.Resource, ""))), "widgets", false},
		{"a Service listing ConfigMaps", context.Background(), tenancy.Catalog,
			serviceObj(service("core", servicesv1alpha1.Draft, resource("", "configmaps", ""))), "core", true},
		{"a Service listing a Kubernetes group", context.Background(), tenancy.Catalog,
			serviceObj(service("rbac", servicesv1alpha1.Draft, resource("rbac.authorization.k8s.io", "roles", ""))), "rbac", true},
		{"a Service listing Milo's projects", context.Background(), tenancy.Catalog,
			serviceObj(service("rm", servicesv1alpha1.Draft, resource("resourcemanager.miloapis.com", "projects", ""))), "rm", true},
		{"a Service offering a platform Role", context.Background(), tenancy.Catalog, serviceObj(offering("offers", "")), "offers", false},
		{"a Service offering an organization's Role", context.Background(), tenancy.Catalog, serviceObj(offering("offers", "organization-acme")), "offers", true},
		{"enabling a published service", projectCtx, tenancy.Activations, activation("widgets"), "widgets", false},
		{"enabling a deprecated service", projectCtx, tenancy.Activations, activation("old"), "old", false},
		{"enabling a draft", projectCtx, tenancy.Activations, activation("draft"), "draft", true},
		{"enabling a retired service", projectCtx, tenancy.Activations, activation("gone"), "gone", true},
		{"enabling a missing service", projectCtx, tenancy.Activations, activation("missing"), "missing", true},
		{"enabling at the platform", context.Background(), tenancy.Activations, activation("widgets"), "widgets", true},
	} {
		err := p.Admit(tc.ctx, attrs(tc.gr, tc.obj, tc.name), nil)
		if err == nil {
			err = p.Validate(tc.ctx, attrs(tc.gr, tc.obj, tc.name), nil)
		}
		if tc.invalid != apierrors.IsInvalid(err) || (!tc.invalid && err != nil) {
			t.Errorf("%s: %v, want invalid %v", tc.what, err, tc.invalid)
		}
	}

	// The phase label follows spec.phase, whatever the client sent.
	obj := serviceObj(service("widgets", servicesv1alpha1.Deprecated))
	obj.(*unstructured.Unstructured).SetLabels(map[string]string{servicesv1alpha1.PhaseLabel: "Published"})
	if err := p.Admit(context.Background(), attrs(tenancy.Catalog, obj, "widgets"), nil); err != nil {
		t.Fatal(err)
	}
	if got := obj.(*unstructured.Unstructured).GetLabels()[servicesv1alpha1.PhaseLabel]; got != "Deprecated" {
		t.Errorf("phase label %q, want Deprecated", got)
	}
}

// An enablement counts only while its activation is not being deleted, for
// the Service it was made for, out of Draft; a watch it serves ends with it.
func TestEnablementsEnd(t *testing.T) {
	published := service("widgets", servicesv1alpha1.Published, resource(widgets.Group, widgets.Resource, servicesv1alpha1.ContextProject))
	c := catalogOf(t, []servicesv1alpha1.Service{published}, nil, nil)
	if a := activationOf("id-a", "widgets", "uid-widgets"); len(a.Annotations) != 1 || a.Labels != nil {
		t.Fatalf("the informer keeps of an activation %+v", a.ObjectMeta)
	}
	c.activation(activationOf("id-a", "widgets", "uid-widgets"), true)
	c.activation(activationOf("id-b", "widgets", "uid-of-an-older-widgets"), true)
	if !c.Served(enabling, widgets) || c.Served(other, widgets) {
		t.Fatal("an activation made for another Service of the same name enables it")
	}

	watchCtx, done := c.Watch(context.Background(), "id-a", widgets)
	defer done()
	deleting := activationOf("id-a", "widgets", "uid-widgets")
	deleting.DeletionTimestamp = &metav1.Time{}
	c.activation(deleting, true)
	if c.Served(enabling, widgets) {
		t.Fatal("an activation held by a finalizer keeps the service enabled")
	}
	select {
	case <-watchCtx.Done():
	default:
		t.Fatal("a watch of the disabled service goes on")
	}

	// Back to Draft: no project is served, enabled or not.
	c.activation(activationOf("id-a", "widgets", "uid-widgets"), true)
	draft := published
	draft.Spec.Phase = servicesv1alpha1.Draft
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&draft)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.services.Update(&unstructured.Unstructured{Object: obj}); err != nil {
		t.Fatal(err)
	}
	c.build()
	if c.Served(enabling, widgets) || c.Served(tenancy.AllProjectsTenant, widgets) {
		t.Fatal("a Service back in Draft is served in a project that enabled it")
	}
}

// The Service an activation enables is the server's to record: at creation,
// the UID of the Service of its name; later, what it was.
func TestActivationsRecordTheirService(t *testing.T) {
	c := catalogOf(t, []servicesv1alpha1.Service{service("widgets", servicesv1alpha1.Published)}, nil, nil)
	p := &plugin{Handler: admission.NewHandler(admission.Create, admission.Update), catalog: c}
	obj := func(uid string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "widgets", "annotations": map[string]any{ServiceUIDAnnotation: uid}},
			"spec": map[string]any{"serviceRef": map[string]any{"name": "widgets"}}}}
	}
	ctx := tenancy.WithTenant(context.Background(), enabling)
	created := obj("forged")
	if err := p.Admit(ctx, admission.NewAttributesRecord(created, nil, servicesv1alpha1.SchemeGroupVersion.WithKind("ServiceActivation"), "", "widgets",
		servicesv1alpha1.ActivationsResource, "", admission.Create, nil, false, nil), nil); err != nil {
		t.Fatal(err)
	}
	if got := created.GetAnnotations()[ServiceUIDAnnotation]; got != "uid-widgets" {
		t.Fatalf("created with the Service UID %q, want uid-widgets", got)
	}
	updated := obj("uid-widgets")
	if err := p.Admit(ctx, admission.NewAttributesRecord(updated, obj("uid-of-old"), servicesv1alpha1.SchemeGroupVersion.WithKind("ServiceActivation"), "", "widgets",
		servicesv1alpha1.ActivationsResource, "", admission.Update, nil, false, nil), nil); err != nil {
		t.Fatal(err)
	}
	if got := updated.GetAnnotations()[ServiceUIDAnnotation]; got != "uid-of-old" {
		t.Fatalf("an update changed the recorded Service to %q", got)
	}
}

// BenchmarkServed is the router's question for a service's resource in a
// project that enabled the service, with one enablement in the catalog and
// with 100,000: the answer is two map lookups either way.
func BenchmarkServed(b *testing.B) {
	for _, n := range []int{1, 100000} {
		b.Run(fmt.Sprintf("enablements=%d", n), func(b *testing.B) {
			c := catalogOf(b, []servicesv1alpha1.Service{
				service("widgets", servicesv1alpha1.Published, resource(widgets.Group, widgets.Resource, servicesv1alpha1.ContextProject))}, nil, nil)
			for i := range n {
				c.activation(activationOf(fmt.Sprintf("id-%d", i), "widgets", "uid-widgets"), true)
			}
			project := tenancy.Tenant{Kind: tenancy.Project, Name: "p", ID: fmt.Sprintf("id-%d", n/2)}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if !c.Served(project, widgets) {
					b.Fatal("not served")
				}
			}
		})
	}
}

// A watch ends when its Service goes, and one opened after its enablement
// went never starts.
func TestWatchesEndWithTheirService(t *testing.T) {
	c := catalogOf(t, []servicesv1alpha1.Service{
		service("widgets", servicesv1alpha1.Published, resource(widgets.Group, widgets.Resource, servicesv1alpha1.ContextProject))}, nil, map[string]string{"id-a": "widgets"})
	open, done := c.Watch(context.Background(), "id-a", widgets)
	defer done()
	late, lateDone := c.Watch(context.Background(), "id-b", widgets)
	defer lateDone()
	if late.Err() == nil {
		t.Fatal("a watch for a project that has not enabled the service is open")
	}
	if open.Err() != nil {
		t.Fatal("the enabling project's watch ended at once")
	}
	if err := c.services.Delete(c.services.List()[0]); err != nil {
		t.Fatal(err)
	}
	c.build()
	if open.Err() == nil {
		t.Fatal("a watch goes on after its Service was deleted")
	}
}

// The all-projects view's watches hear of every project's enablement of the
// Service of their resource coming and going, and of nothing else; they end
// when the resource passes to another Service or its Service returns to
// Draft, as do a project's.
func TestAllProjectsWatchesFollowEnablements(t *testing.T) {
	widgetsSvc := service("widgets", servicesv1alpha1.Published, resource(widgets.Group, widgets.Resource, servicesv1alpha1.ContextProject))
	widgetsSvc.CreationTimestamp = metav1.Unix(2, 0)
	c := catalogOf(t, []servicesv1alpha1.Service{widgetsSvc,
		service("billing", servicesv1alpha1.Published, resource(billing.Group, billing.Resource, servicesv1alpha1.ContextProject))}, nil, nil)
	var heard []string
	stop, fresh := c.OnShownChange(widgets, 0, func(project string) { heard = append(heard, project) })
	if !fresh {
		t.Fatal("a watch from now is refused")
	}
	c.activation(activationOf("id-a", "widgets", "uid-widgets"), true)
	c.activation(activationOf("id-a", "widgets", "uid-widgets"), true)           // unchanged: nothing to tell
	c.activation(activationOf("id-b", "billing", "uid-billing"), true)           // another Service's
	c.activation(activationOf("id-d", "widgets", "uid-of-an-old-widgets"), true) // for a Service gone: not in effect
	c.activation(activationOf("id-d", "widgets", "uid-of-an-old-widgets"), false)
	c.activation(activationOf("id-a", "widgets", "uid-widgets"), false)
	c.activation(activationOf("id-c", "widgets", "uid-widgets"), false) // never enabled
	if fmt.Sprint(heard) != "[id-a id-a]" {
		t.Fatalf("the all-projects view heard of %v, want id-a enabling and disabling", heard)
	}
	stop()
	// The activations changed at resource version 7: a watch from before
	// is told of id-a at once, one from then of nothing.
	for since, want := range map[uint64]string{6: "[id-a id-a]", 7: "[]", 0: "[]"} {
		var told []string
		stop, fresh := c.OnShownChange(widgets, since, func(p string) { told = append(told, p) })
		stop()
		if !fresh || fmt.Sprint(told) != want {
			t.Errorf("a watch of widgets from %d: fresh %v, told of %v, want %s", since, fresh, told, want)
		}
	}
	// So many changes later that the catalog no longer holds them all, a
	// watch from 6 cannot be told: it lists again.
	for i := range changeLogSize {
		c.activation(activationOf(fmt.Sprintf("id-many-%d", i), "widgets", "uid-widgets"), true)
	}
	if _, fresh := c.OnShownChange(widgets, 6, func(string) {}); fresh {
		t.Error("a watch from before the changes the catalog holds is told it is fresh")
	}
	// A Service's change is recorded at its event: a watch of its
	// resources from before it cannot be told; a resource no Service ever
	// listed has nothing to tell, whatever the catalog's floor.
	c.floor = 5
	changedSvc := widgetsSvc
	changedSvc.ResourceVersion = "9000"
	changedSvc.Spec.Phase = servicesv1alpha1.Draft
	c.serviceChanged(&widgetsSvc, &changedSvc)
	for since, want := range map[uint64]bool{8999: false, 9000: true} {
		if _, fresh := c.OnShownChange(widgets, since, nil); fresh != want {
			t.Errorf("a watch of widgets from %d after its Service changed at 9000: fresh %v, want %v", since, fresh, want)
		}
	}
	if _, fresh := c.OnShownChange(ungated, 1, nil); !fresh {
		t.Error("a watch of a resource no Service lists is refused")
	}
	unchanged := widgetsSvc
	unchanged.ResourceVersion = "9500"
	unchanged.Spec.Description = "only the description"
	c.serviceChanged(&widgetsSvc, &unchanged)
	if _, fresh := c.OnShownChange(widgets, 9000, nil); !fresh {
		t.Error("a Service's description changed what a watch must be told")
	}
	c.activation(activationOf("id-a", "widgets", "uid-widgets"), true)
	if len(heard) != 2 {
		t.Fatal("a subscription goes on after it was stopped")
	}

	// A watch opened for a project and one of the all-projects view end
	// when another Service, older, takes the resource.
	projectWatch, done := c.Watch(context.Background(), "id-a", widgets)
	defer done()
	allWatch, allDone := c.Watch(context.Background(), "", widgets)
	defer allDone()
	if projectWatch.Err() != nil || allWatch.Err() != nil {
		t.Fatal("a served watch ended at once")
	}
	older := service("gadgets", servicesv1alpha1.Published, resource(widgets.Group, widgets.Resource, servicesv1alpha1.ContextProject))
	older.CreationTimestamp = metav1.Unix(1, 0)
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&older)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.services.Add(&unstructured.Unstructured{Object: obj}); err != nil {
		t.Fatal(err)
	}
	c.build()
	if projectWatch.Err() == nil || allWatch.Err() == nil {
		t.Fatal("watches opened under one Service go on after another took the resource")
	}

	// The all-projects view's watch of a Draft Service's resource ends.
	billingWatch, billingDone := c.Watch(context.Background(), "", billing)
	defer billingDone()
	draft := service("billing", servicesv1alpha1.Draft, resource(billing.Group, billing.Resource, servicesv1alpha1.ContextProject))
	if obj, err = runtime.DefaultUnstructuredConverter.ToUnstructured(&draft); err != nil {
		t.Fatal(err)
	}
	if err := c.services.Update(&unstructured.Unstructured{Object: obj}); err != nil {
		t.Fatal(err)
	}
	if billingWatch.Err() != nil {
		t.Fatal("ended before the Service changed")
	}
	c.build()
	if billingWatch.Err() == nil {
		t.Fatal("an all-projects watch goes on after its Service returned to Draft")
	}

	// Watches of a resource no Service lists end when one comes to; those
	// of Kubernetes' resources are never held.
	freeWatch, freeDone := c.Watch(context.Background(), "", ungated)
	defer freeDone()
	projectFree, projectFreeDone := c.Watch(context.Background(), "id-a", ungated)
	defer projectFreeDone()
	c.Watch(context.Background(), "id-a", schema.GroupResource{Resource: "configmaps"})
	claims := service("things", servicesv1alpha1.Draft, resource(ungated.Group, ungated.Resource, servicesv1alpha1.ContextProject))
	if obj, err = runtime.DefaultUnstructuredConverter.ToUnstructured(&claims); err != nil {
		t.Fatal(err)
	}
	if err := c.services.Add(&unstructured.Unstructured{Object: obj}); err != nil {
		t.Fatal(err)
	}
	if freeWatch.Err() != nil || projectFree.Err() != nil {
		t.Fatal("ended before a Service listed the resource")
	}
	c.build()
	if freeWatch.Err() == nil || projectFree.Err() == nil {
		t.Fatal("watches of a resource go on after a Service listed it")
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for e := range c.watches {
		if e.service == "" && e.project == "id-a" {
			for _, w := range c.watches[e] {
				if w.gr.Resource == "configmaps" {
					t.Fatal("a watch of ConfigMaps is held by the catalog")
				}
			}
		}
	}
}

// A group an aggregated server serves may hold resources no Service lists:
// the group stays in discovery, only the resources Services hide are hidden.
func TestAggregatedGroupsAreNeverHiddenWhole(t *testing.T) {
	samples := schema.GroupResource{Group: "metrics.example.com", Resource: "samples"}
	c := catalogOf(t, []servicesv1alpha1.Service{service("metrics", servicesv1alpha1.Published,
		resource(samples.Group, samples.Resource, servicesv1alpha1.ContextProject))}, nil, nil)
	if !c.GroupHidden(other, samples.Group) {
		t.Fatal("a group whose every known resource is hidden is shown")
	}
	c.apiServices = cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := c.apiServices.Add(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "v1." + samples.Group},
		"spec": map[string]any{"group": samples.Group, "version": "v1", "service": map[string]any{"name": "metrics", "namespace": "metrics"}}}}); err != nil {
		t.Fatal(err)
	}
	c.build()
	if c.GroupHidden(other, samples.Group) || c.Served(other, samples) {
		t.Fatal("an aggregated group: want it shown and the resource its Service lists hidden")
	}
}
