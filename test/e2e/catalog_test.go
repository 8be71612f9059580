package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"go.miloapis.com/milo/pkg/tenancy"
)

var (
	servicesGVR    = schema.GroupVersionResource{Group: "services.miloapis.com", Version: "v1alpha1", Resource: "services"}
	activationsGVR = schema.GroupVersionResource{Group: "services.miloapis.com", Version: "v1alpha1", Resource: "serviceactivations"}
	gadgetsGVR     = schema.GroupVersionResource{Group: "catalog.e2e.example", Version: "v1", Resource: "gadgets"}
)

const gadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.catalog.e2e.example
spec:
  group: catalog.e2e.example
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
`

func gadgetService(phase string) string {
	return fmt.Sprintf(`apiVersion: services.miloapis.com/v1alpha1
kind: Service
metadata:
  name: gadgets.catalog.e2e.example
spec:
  displayName: Gadgets
  description: Gadgets for every project.
  phase: %s
  resources:
  - group: catalog.e2e.example
    resource: gadgets
`, phase)
}

func gadget(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "catalog.e2e.example/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": name, "namespace": "default"}, "spec": map[string]any{"size": int64(1)}}}
}

func activation(service string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "services.miloapis.com/v1alpha1", "kind": "ServiceActivation",
		"metadata": map[string]any{"name": service}, "spec": map[string]any{"serviceRef": map[string]any{"name": service}}}}
}

// servesGadgets reports whether discovery at cfg's context lists gadgets.
func servesGadgets(t *testing.T, d discovery.DiscoveryInterface) bool {
	t.Helper()
	_, lists, err := d.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		t.Fatal(err)
	}
	for _, l := range lists {
		if strings.HasPrefix(l.GroupVersion, gadgetsGVR.Group+"/") {
			for _, r := range l.APIResources {
				if r.Name == "gadgets" {
					return true
				}
			}
		}
	}
	return false
}

// A provider registers a service; a consumer finds it in the catalog and
// enables it in one project; the service's resources are served there and
// nowhere else, data outlives a disable, and the phases rule who may enable.
func TestServiceCatalog(t *testing.T) {
	m := shared
	ctx := context.Background()
	n := projectSeq.Add(1)
	org := fmt.Sprintf("catalog-%d", n)
	a, b := org+"-a", org+"-b"
	const service = "gadgets.catalog.e2e.example"

	m.mustKubectl(t, gadgetCRD, "apply", "-f", "-")
	m.waitEstablished(t, "crd/"+service)
	t.Cleanup(func() {
		m.kubectl(t, "", "delete", "services.services.miloapis.com/"+service, "--ignore-not-found")
	})

	m.createOrganizationAs(t, "alice-token", org)
	aliceOrg := m.dynamicAs(t, "alice-token", tenancy.OrganizationPath(org))
	for _, p := range []string{a, b} {
		if _, err := aliceOrg.Resource(projectsGVR).Create(ctx, objectOf("Project", p, map[string]any{
			"ownerRef": map[string]any{"kind": "Organization", "name": org}}), metav1.CreateOptions{}); err != nil {
			t.Fatalf("alice creates project %s: %v", p, err)
		}
		m.waitProjectReady(t, p)
	}
	in := func(p string) dynamic.NamespaceableResourceInterface {
		return m.dynamicAs(t, "alice-token", tenancy.ProjectPath(p)).Resource(gadgetsGVR)
	}
	activations := func(token, p string) dynamic.NamespaceableResourceInterface {
		return m.dynamicAs(t, token, tenancy.ProjectPath(p)).Resource(activationsGVR)
	}
	// Before any Service lists gadgets, they are served in every project.
	for _, p := range []string{a, b} {
		if _, err := in(p).Namespace("default").Create(ctx, gadget("before"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a gadget in %s before the service exists: %v", p, err)
		}
	}

	// The provider registers the service, in Draft.
	m.mustKubectl(t, gadgetService("Draft"), "apply", "-f", "-")
	hidden := func(p string) error {
		_, err := in(p).Namespace("default").Get(ctx, "before", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("gadgets in %s: %v, want 404", p, err)
		}
		if servesGadgets(t, m.as(t, "alice-token", tenancy.ProjectPath(p)).Discovery()) {
			return fmt.Errorf("the discovery of %s lists gadgets", p)
		}
		return nil
	}
	eventually(t, "gadgets hidden in both projects once a Service lists them", func() error {
		if err := hidden(a); err != nil {
			return err
		}
		return hidden(b)
	})
	// The all-projects view serves a Draft's resources nowhere: its
	// discovery says so.
	if servesGadgets(t, m.as(t, "carol-token", tenancy.AllProjectsPath).Discovery()) {
		t.Fatal("the all-projects view's discovery lists the gadgets of a Draft service")
	}
	if r := m.kubectlWith(t, m.tokenKubeconfig(t, "alice-token", tenancy.ProjectPath(a)), "", "get", "gadgets"); r.err == nil ||
		!strings.Contains(r.stderr, `the server doesn't have a resource type "gadgets"`) {
		t.Fatalf("kubectl get gadgets in %s before enabling: %v\n%s", a, r.err, r.stderr)
	}
	// A Draft is not in the catalog and cannot be enabled.
	aliceCatalog := m.dynamicAs(t, "alice-token", tenancy.OrganizationPath(org)).Resource(servicesGVR)
	if list, err := aliceCatalog.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("the catalog lists a Draft: %v %v", list, err)
	}
	if _, err := activations("alice-token", a).Create(ctx, activation(service), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("enabling a Draft: %v, want 422", err)
	}

	// Published: the organization's and the projects' catalogs list it.
	m.mustKubectl(t, gadgetService("Published"), "apply", "-f", "-")
	// Its status says the platform serves what it lists; a Service listing
	// a resource nobody serves says which.
	m.mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=60s", "services.services.miloapis.com/"+service)
	m.mustKubectl(t, `apiVersion: services.miloapis.com/v1alpha1
kind: Service
metadata: {name: nothing.catalog.e2e.example}
spec:
  displayName: Nothing
  resources: [{group: nothing.e2e.example, resource: nothings}]
`, "apply", "-f", "-")
	t.Cleanup(func() {
		m.kubectl(t, "", "delete", "services.services.miloapis.com/nothing.catalog.e2e.example", "--ignore-not-found")
	})
	m.mustKubectl(t, "", "wait", "--for=condition=Ready=false", "--timeout=60s", "services.services.miloapis.com/nothing.catalog.e2e.example")
	if msg := m.mustKubectl(t, "", "get", "services.services.miloapis.com/nothing.catalog.e2e.example", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].message}`); !strings.Contains(msg, "nothings.nothing.e2e.example") {
		t.Fatalf("the Ready condition of a Service listing an unserved resource: %q", msg)
	}
	// A resource belongs to one Service.
	if r := m.kubectl(t, `apiVersion: services.miloapis.com/v1alpha1
kind: Service
metadata: {name: thief.catalog.e2e.example}
spec:
  displayName: Thief
  resources: [{group: catalog.e2e.example, resource: gadgets}]
`, "apply", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, "is listed by Service "+service) {
		t.Fatalf("a second Service listing gadgets: %v %s", r.err, r.stderr)
	}
	eventually(t, "the catalog lists the published service", func() error {
		list, err := aliceCatalog.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].GetName() != service {
			return fmt.Errorf("catalog %v", list.Items)
		}
		_, err = m.dynamicAs(t, "alice-token", tenancy.ProjectPath(a)).Resource(servicesGVR).Get(ctx, service, metav1.GetOptions{})
		return err
	})
	out := m.kubectlWith(t, m.tokenKubeconfig(t, "alice-token", tenancy.OrganizationPath(org)), "", "get", "services.services.miloapis.com")
	if out.err != nil || !strings.Contains(out.stdout, "Gadgets") {
		t.Fatalf("kubectl get services in the organization's context: %v\n%s%s", out.err, out.stdout, out.stderr)
	}
	// The organization's discovery lists what its context serves: its own
	// kinds and namespaced ones, not the platform's cluster-scoped kinds nor
	// a service's project resources.
	_, orgLists, err := m.as(t, "alice-token", tenancy.OrganizationPath(org)).Discovery().ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		t.Fatal(err)
	}
	orgServes := map[string]bool{}
	for _, l := range orgLists {
		group, _, _ := strings.Cut(l.GroupVersion, "/")
		if !strings.Contains(l.GroupVersion, "/") {
			group = ""
		}
		for _, r := range l.APIResources {
			orgServes[schema.GroupResource{Group: group, Resource: r.Name}.String()] = true
		}
	}
	for gr, want := range map[string]bool{"projects.resourcemanager.miloapis.com": true, "folders.resourcemanager.miloapis.com": true,
		"roles.iam.miloapis.com": true, "configmaps": true, "services.services.miloapis.com": true,
		"clusterroles.rbac.authorization.k8s.io": false, "customresourcedefinitions.apiextensions.k8s.io": false,
		"users.iam.miloapis.com": false, "gadgets.catalog.e2e.example": false, "serviceactivations.services.miloapis.com": false} {
		if orgServes[gr] != want {
			t.Errorf("the discovery of organization %s lists %s: %v, want %v", org, gr, orgServes[gr], want)
		}
	}
	if r := m.kubectlWith(t, m.tokenKubeconfig(t, "alice-token", tenancy.OrganizationPath(org)), "", "get", "projects"); r.err != nil || !strings.Contains(r.stdout, a) {
		t.Fatalf("kubectl get projects in the organization's context: %v %s%s", r.err, r.stdout, r.stderr)
	}
	// Resource requests there are not discovery's: a watch streams.
	pw, err := aliceOrg.Resource(projectsGVR).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching projects in the organization's context: %v", err)
	}
	select {
	case e, ok := <-pw.ResultChan():
		if !ok || e.Type != "ADDED" {
			t.Fatalf("the first event of a watch of projects in the organization's context: %v %v", e.Type, ok)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event from a watch of projects in the organization's context")
	}
	pw.Stop()

	// The catalog is read-only outside the platform.
	if _, err := aliceCatalog.Create(ctx, objectOf("Service", "mine.example.com", map[string]any{"displayName": "x"}), metav1.CreateOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("creating a Service in an organization's context: %v, want 405", err)
	}

	// A viewer of the project reads the catalog but may not enable a service.
	if _, err := aliceOrg.Resource(policyBindingsGVR).Namespace(tenancy.OrganizationNamespace(org)).Create(ctx, objectOf("PolicyBinding", "bob-views-"+a, map[string]any{
		"roleRef":          map[string]any{"name": "viewer", "namespace": "milo-system"},
		"subjects":         []any{map[string]any{"kind": "User", "name": "bob"}},
		"resourceSelector": map[string]any{"resourceRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project", "name": a}},
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bob, viewer, reads the catalog in "+a, func() error {
		_, err := m.dynamicAs(t, "bob-token", tenancy.ProjectPath(a)).Resource(servicesGVR).List(ctx, metav1.ListOptions{})
		return err
	})
	if _, err := activations("bob-token", a).Create(ctx, activation(service), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob, viewer, enables a service: %v, want 403", err)
	}

	// alice enables it in a only: its gadgets, stored before, come back; b's stay hidden.
	if r := m.kubectlWith(t, m.tokenKubeconfig(t, "alice-token", tenancy.ProjectPath(a)), activationYAML(service), "create", "-f", "-"); r.err != nil {
		t.Fatalf("alice enables the service in %s: %v\n%s", a, r.err, r.stderr)
	}
	eventually(t, "gadgets served in "+a, func() error {
		_, err := in(a).Namespace("default").Get(ctx, "before", metav1.GetOptions{})
		return err
	})
	if !servesGadgets(t, m.as(t, "alice-token", tenancy.ProjectPath(a)).Discovery()) {
		t.Fatalf("the discovery of %s lacks gadgets once enabled", a)
	}
	if err := hidden(b); err != nil {
		t.Fatal(err)
	}
	if _, err := in(b).Namespace("default").Create(ctx, gadget("after"), metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("creating a gadget in %s, which did not enable the service: %v, want 404", b, err)
	}
	out = m.kubectlWith(t, m.tokenKubeconfig(t, "alice-token", tenancy.ProjectPath(a)), "", "get", "gadgets")
	if out.err != nil || !strings.Contains(out.stdout, "before") {
		t.Fatalf("kubectl get gadgets in %s: %v\n%s%s", a, out.err, out.stdout, out.stderr)
	}

	// An outsider cannot tell a project that enabled the service from a missing one.
	outsider := func(p string) error {
		_, err := m.dynamicAs(t, "carol-token", tenancy.ProjectPath(p)).Resource(gadgetsGVR).Namespace("default").Get(ctx, "before", metav1.GetOptions{})
		return err
	}
	errA, errMissing := outsider(a), outsider(org+"-missing")
	if apierrors.ReasonForError(errA) != apierrors.ReasonForError(errMissing) || apierrors.ReasonForError(errA) == metav1.StatusReasonUnknown {
		t.Fatalf("an outsider tells an enabling project (%v) from a missing one (%v)", errA, errMissing)
	}

	// The all-projects view shows anyone but the platform's superusers the
	// objects of the projects that enabled the service only.
	grantAllProjectsGadgets(t, m, "carol")
	eventually(t, "carol lists gadgets across projects", func() error {
		list, err := m.dynamicAs(t, "carol-token", tenancy.AllProjectsPath).Resource(gadgetsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var projects []string
		for _, item := range list.Items {
			if strings.HasPrefix(item.GetAnnotations()[tenancy.AnnotationKey], org) {
				projects = append(projects, item.GetAnnotations()[tenancy.AnnotationKey])
			}
		}
		if len(projects) != 1 || projects[0] != a {
			return fmt.Errorf("carol's all-projects list shows gadgets of %v, want %s only", projects, a)
		}
		if !servesGadgets(t, m.as(t, "carol-token", tenancy.AllProjectsPath).Discovery()) {
			return fmt.Errorf("the all-projects view's discovery lacks the gadgets of a Published service")
		}
		return nil
	})
	// An all-projects watch is told of a project's objects when the
	// project disables the service (DELETED) and enables it again (ADDED).
	carolList, err := m.dynamicAs(t, "carol-token", tenancy.AllProjectsPath).Resource(gadgetsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	carolWatch, err := m.dynamicAs(t, "carol-token", tenancy.AllProjectsPath).Resource(gadgetsGVR).Watch(ctx, metav1.ListOptions{ResourceVersion: carolList.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer carolWatch.Stop()
	carolHears := func(want watch.EventType) {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case e, ok := <-carolWatch.ResultChan():
				if !ok {
					t.Fatalf("carol's all-projects watch ended, waiting for %s of %s's gadget", want, a)
				}
				u, isObj := e.Object.(*unstructured.Unstructured)
				if !isObj || e.Type == watch.Bookmark {
					continue
				}
				if p := u.GetAnnotations()[tenancy.AnnotationKey]; p != a {
					t.Fatalf("carol's all-projects watch: %s of a gadget of %s", e.Type, p)
				}
				if e.Type == want && u.GetName() == "before" {
					return
				}
			case <-timeout:
				t.Fatalf("carol's all-projects watch: no %s of %s's gadget", want, a)
			}
		}
	}
	all, err := dynamicFor(t, m.configAt(t, tenancy.AllProjectsPath)).Resource(gadgetsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, item := range all.Items {
		seen[item.GetAnnotations()[tenancy.AnnotationKey]] = true
	}
	if !seen[a] || !seen[b] {
		t.Fatalf("the platform's all-projects list shows gadgets of %v, want %s and %s", seen, a, b)
	}

	// Disabling hides the gadgets again, and keeps them: enabling again
	// brings them back. A watch open when the service is disabled ends.
	w, err := in(a).Namespace("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := activations("alice-token", a).Delete(ctx, service, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gadgets hidden in "+a+" once disabled", func() error { return hidden(a) })
	carolHears(watch.Deleted)
	ended := time.After(time.Minute)
	for open := true; open; {
		select {
		case _, open = <-w.ResultChan():
		case <-ended:
			t.Fatalf("a watch of gadgets in %s is still open after the service was disabled", a)
		}
	}
	if _, err := activations("alice-token", a).Create(ctx, activation(service), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gadgets back in "+a, func() error {
		_, err := in(a).Namespace("default").Get(ctx, "before", metav1.GetOptions{})
		return err
	})
	carolHears(watch.Added)

	// A Role grants only registered permissions: the gadgets' need a
	// ProtectedResource first.
	gadgetReader := role("gadget-reader", []string{"catalog.e2e.example/gadgets.get"})
	if _, err := aliceOrg.Resource(rolesGVR).Namespace(tenancy.OrganizationNamespace(org)).Create(ctx, gadgetReader, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "no ProtectedResource registers") {
		t.Fatalf("a Role granting an unregistered permission: %v, want 422", err)
	}
	m.mustKubectl(t, `apiVersion: iam.miloapis.com/v1alpha1
kind: ProtectedResource
metadata: {name: gadgets.catalog.e2e.example}
spec:
  serviceRef: {name: catalog.e2e.example}
  kind: Gadget
  plural: gadgets
  singular: gadget
  permissions: [get, list, watch]
  parentResources: [{apiGroup: resourcemanager.miloapis.com, kind: Project}]
`, "apply", "-f", "-")
	t.Cleanup(func() {
		m.kubectl(t, "", "delete", "protectedresources.iam.miloapis.com/gadgets.catalog.e2e.example", "--ignore-not-found")
	})
	eventually(t, "a Role granting a registered permission", func() error {
		_, err := aliceOrg.Resource(rolesGVR).Namespace(tenancy.OrganizationNamespace(org)).Create(ctx, gadgetReader, metav1.CreateOptions{})
		return err
	})

	// A service offers its consumers platform Roles: its Ready condition
	// waits for them, and a consumer binds one in its project.
	offered := fmt.Sprintf("catalog-e2e-gadget-reader-%d", n)
	offering := fmt.Sprintf("offers-%d.catalog.e2e.example", n)
	if r := m.kubectl(t, fmt.Sprintf(`apiVersion: services.miloapis.com/v1alpha1
kind: Service
metadata: {name: %s}
spec:
  displayName: Offers
  defaultRoles: [{name: %s, namespace: organization-%s}]
`, offering, offered, org), "apply", "-f", "-"); r.err == nil || !strings.Contains(r.stderr, "spec.defaultRoles[0].namespace") {
		t.Fatalf("a Service offering a Role its consumers cannot bind: %v %s, want 422", r.err, r.stderr)
	}
	m.mustKubectl(t, fmt.Sprintf(`apiVersion: services.miloapis.com/v1alpha1
kind: Service
metadata: {name: %s}
spec:
  displayName: Offers
  defaultRoles: [{name: %s}]
`, offering, offered), "apply", "-f", "-")
	t.Cleanup(func() {
		m.kubectl(t, "", "delete", "services.services.miloapis.com/"+offering, "--ignore-not-found")
		m.kubectl(t, "", "delete", "roles.iam.miloapis.com/"+offered, "-n", "milo-system", "--ignore-not-found")
	})
	if ns := m.mustKubectl(t, "", "get", "services.services.miloapis.com/"+offering, "-o", "jsonpath={.spec.defaultRoles[0].namespace}"); ns != "milo-system" {
		t.Fatalf("a default Role named without a namespace is in %q, want milo-system", ns)
	}
	m.mustKubectl(t, "", "wait", "--for=condition=Ready=false", "--timeout=60s", "services.services.miloapis.com/"+offering)
	if reason := m.mustKubectl(t, "", "get", "services.services.miloapis.com/"+offering, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].reason}`); reason != "DefaultRolesMissing" {
		t.Fatalf("the Ready reason of a Service offering a missing Role: %q", reason)
	}
	if _, err := m.dynamic(t).Resource(rolesGVR).Namespace("milo-system").Create(ctx, role(offered, []string{"catalog.e2e.example/gadgets.get"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=60s", "services.services.miloapis.com/"+offering)
	if _, err := aliceOrg.Resource(policyBindingsGVR).Namespace(tenancy.OrganizationNamespace(org)).Create(ctx, objectOf("PolicyBinding", "carol-reads-gadgets-"+a, map[string]any{
		"roleRef":          map[string]any{"name": offered, "namespace": "milo-system"},
		"subjects":         []any{map[string]any{"kind": "User", "name": "carol"}},
		"resourceSelector": map[string]any{"resourceRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project", "name": a}},
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "carol reads gadgets in "+a+" through the offered Role", func() error {
		_, err := m.dynamicAs(t, "carol-token", tenancy.ProjectPath(a)).Resource(gadgetsGVR).Namespace("default").Get(ctx, "before", metav1.GetOptions{})
		return err
	})

	// Deprecated: enabling warns; Retired: enabling is refused.
	m.mustKubectl(t, gadgetService("Deprecated"), "apply", "-f", "-")
	eventually(t, "enabling a Deprecated service warns", func() error {
		r := m.kubectlWith(t, m.tokenKubeconfig(t, "alice-token", tenancy.ProjectPath(b)), activationYAML(service), "create", "-f", "-")
		if r.err != nil {
			return fmt.Errorf("%v: %s", r.err, r.stderr)
		}
		if !strings.Contains(r.stderr, "Warning: service "+service+" is Deprecated") {
			m.kubectlWith(t, m.tokenKubeconfig(t, "alice-token", tenancy.ProjectPath(b)), "", "delete", "serviceactivation/"+service)
			return fmt.Errorf("no warning: %s", r.stderr)
		}
		return nil
	})
	if err := activations("alice-token", b).Delete(ctx, service, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	m.mustKubectl(t, gadgetService("Retired"), "apply", "-f", "-")
	eventually(t, "enabling a Retired service is refused", func() error {
		_, err := activations("alice-token", b).Create(ctx, activation(service), metav1.CreateOptions{})
		if apierrors.IsInvalid(err) {
			return nil
		}
		if err == nil {
			activations("alice-token", b).Delete(ctx, service, metav1.DeleteOptions{}) //nolint:errcheck
		}
		return fmt.Errorf("enabling a Retired service: %v, want 422", err)
	})
	// Projects that enabled it before it retired keep it.
	if _, err := in(a).Namespace("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("a project that enabled the service before it retired: %v", err)
	}

	// A project that enabled a service is deleted whole (its activation,
	// its objects of the service), and the platform's catalog is untouched.
	if err := aliceOrg.Resource(projectsGVR).Delete(ctx, a, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 2*time.Minute, "project "+a+" deleted", func() error {
		_, err := m.dynamic(t).Resource(projectsGVR).Get(ctx, a, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("project %s: %v", a, err)
	})
	if _, err := m.dynamic(t).Resource(servicesGVR).Get(ctx, service, metav1.GetOptions{}); err != nil {
		t.Fatalf("the Service after a project that enabled it was deleted: %v", err)
	}
	// The catalog reads as read-only in a project's discovery.
	resources, err := m.as(t, "alice-token", tenancy.ProjectPath(b)).Discovery().ServerResourcesForGroupVersion("services.miloapis.com/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources.APIResources {
		if r.Name == "services" && fmt.Sprint(r.Verbs) != "[get list watch]" {
			t.Fatalf("the catalog's verbs in a project: %v", r.Verbs)
		}
	}
}

func activationYAML(service string) string {
	return fmt.Sprintf("apiVersion: services.miloapis.com/v1alpha1\nkind: ServiceActivation\nmetadata: {name: %s}\nspec: {serviceRef: {name: %s}}\n", service, service)
}

// grantAllProjectsGadgets lets user list gadgets at the platform, and so
// across projects.
func grantAllProjectsGadgets(t *testing.T, m *milo, user string) {
	t.Helper()
	ctx := context.Background()
	name := "gadget-reader-" + user
	if _, err := m.kube(t).RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{gadgetsGVR.Group}, Resources: []string{"gadgets"}, Verbs: []string{"list", "watch"}}}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := m.kube(t).RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
