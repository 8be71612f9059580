package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// catalogOptions size the measurement of the service catalog (Milo only).
type catalogOptions struct {
	// Projects enable the first service, one ServiceActivation each.
	Projects int
	// Services are registered in all (each with a CRD of its own); project 0 enables every one.
	Services int
	// Samples GETs and discovery documents are timed, one after another.
	Samples int
}

// catalogResult is the measurement of the service catalog.
type catalogResult struct {
	Options catalogOptions
	// Before is the server before the enablements beyond project 0's,
	// Enabled after Projects of them.
	Before, Enabled resources
	// EnabledPerSecond is ServiceActivations created per second.
	EnabledPerSecond float64
	// GetOne and GetAll time a GET of a service's object in a project that
	// enabled it, with that one enablement and with Projects of them (ms).
	GetOne, GetAll quantiles
	// DiscoveryOne and DiscoveryAll time the aggregated discovery document
	// of that project with one service enabled and with Services (ms).
	DiscoveryOne, DiscoveryAll quantiles
}

var (
	servicesGVR    = schema.GroupVersionResource{Group: "services.miloapis.com", Version: "v1alpha1", Resource: "services"}
	activationsGVR = schema.GroupVersionResource{Group: "services.miloapis.com", Version: "v1alpha1", Resource: "serviceactivations"}
)

// catalogService is the i-th service of the measurement: a CRD of its own
// group, and the Service listing it.
func catalogService(i int) (*apiextensionsv1.CustomResourceDefinition, *unstructured.Unstructured, schema.GroupVersionResource) {
	group := fmt.Sprintf("s%d.catalog.bench.example", i)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}}}}}}}},
	}
	svc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "services.miloapis.com/v1alpha1", "kind": "Service",
		"metadata": map[string]any{"name": group},
		"spec": map[string]any{"displayName": fmt.Sprintf("Service %d", i), "phase": "Published",
			"resources": []any{map[string]any{"group": group, "resource": "gadgets"}}}}}
	return crd, svc, schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}
}

// measureCatalog registers a service, enables it in project 0 and times a
// GET of its object there; enables it in Projects projects and times the
// GET again, measuring the server's heap per enablement; then registers
// Services services in all, enables each in project 0 and times that
// project's aggregated discovery. Every request is the harness's ordinary
// user's: the server's superusers are not subject to the catalog.
func measureCatalog(ctx context.Context, s *system, o catalogOptions, settle time.Duration, dir string) (*catalogResult, error) {
	r := &catalogResult{Options: o}
	crds, err := apiextensionsclient.NewForConfigAndClient(s.config, s.http)
	if err != nil {
		return nil, err
	}
	admin, err := dynamic.NewForConfigAndClient(s.config, s.http)
	if err != nil {
		return nil, err
	}
	userIn := func(project string) (dynamic.Interface, *rest.Config, error) {
		cfg := rest.CopyConfig(s.user)
		cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.ProjectPath(project)
		d, err := dynamic.NewForConfigAndClient(cfg, s.userHTTP)
		return d, cfg, err
	}
	register := func(i int) (schema.GroupVersionResource, error) {
		crd, svc, gvr := catalogService(i)
		if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return gvr, err
		}
		if _, err := admin.Resource(servicesGVR).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return gvr, err
		}
		return gvr, poll(ctx, time.Minute, func() (bool, error) {
			got, err := admin.Resource(servicesGVR).Get(ctx, svc.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			return slices.ContainsFunc(conds, func(c any) bool {
				m, _ := c.(map[string]any)
				return m["type"] == "Ready" && m["status"] == "True"
			}), nil
		})
	}
	enable := func(project string, i int) error {
		d, _, err := userIn(project)
		if err != nil {
			return err
		}
		_, svc, _ := catalogService(i)
		name := svc.GetName()
		_, err = d.Resource(activationsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "services.miloapis.com/v1alpha1", "kind": "ServiceActivation", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"serviceRef": map[string]any{"name": name}}}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}

	first := projectName(0)
	gvr, err := register(0)
	if err != nil {
		return nil, fmt.Errorf("registering the first service: %w", err)
	}
	if err := enable(first, 0); err != nil {
		return nil, err
	}
	user, cfg, err := userIn(first)
	if err != nil {
		return nil, err
	}
	gadgets := user.Resource(gvr).Namespace("default")
	// Served once the server's index has the enablement (milliseconds).
	if err := poll(ctx, time.Minute, func() (bool, error) {
		_, err := gadgets.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": "Gadget",
			"metadata": map[string]any{"name": "one"}, "spec": map[string]any{"size": int64(1)}}}, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	}); err != nil {
		return nil, fmt.Errorf("the first service is not served in %s: %w", first, err)
	}
	timeGets := func() (quantiles, error) {
		var l latencies
		for range o.Samples {
			began := time.Now()
			if _, err := gadgets.Get(ctx, "one", metav1.GetOptions{}); err != nil {
				return quantiles{}, err
			}
			l = append(l, time.Since(began))
		}
		slices.Sort(l)
		return quantiles{P50: ms(l.quantile(0.5)), P99: ms(l.quantile(0.99))}, nil
	}
	timeDiscovery := func() (quantiles, error) {
		var l latencies
		for range o.Samples {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/apis", nil)
			if err != nil {
				return quantiles{}, err
			}
			req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json")
			began := time.Now()
			resp, err := s.userHTTP.Do(req)
			if err != nil {
				return quantiles{}, err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				return quantiles{}, fmt.Errorf("discovery in %s: %d %v", first, resp.StatusCode, err)
			}
			l = append(l, time.Since(began))
		}
		slices.Sort(l)
		return quantiles{P50: ms(l.quantile(0.5)), P99: ms(l.quantile(0.99))}, nil
	}
	if r.GetOne, err = timeGets(); err != nil {
		return nil, err
	}
	if r.DiscoveryOne, err = timeDiscovery(); err != nil {
		return nil, err
	}
	// What the steps before left in flight (a restart's caches refilling)
	// settles first, so that the difference is the enablements'.
	if settle > 0 {
		time.Sleep(settle)
	}
	if r.Before, err = s.measure(ctx, filepath.Join(dir, "catalog-heap-before.pprof")); err != nil {
		return nil, err
	}
	began := time.Now()
	if err := parallel(ctx, "projects enabling the service", 1, o.Projects, 32, func(i int) error { return enable(projectName(i), 0) }); err != nil {
		return nil, err
	}
	r.EnabledPerSecond = float64(o.Projects-1) / time.Since(began).Seconds()
	if settle > 0 {
		time.Sleep(settle)
	}
	if r.Enabled, err = s.measure(ctx, filepath.Join(dir, "catalog-heap-enabled.pprof")); err != nil {
		return nil, err
	}
	if r.GetAll, err = timeGets(); err != nil {
		return nil, err
	}
	progress("[milo] %d projects enable a service (%.0f/s): heap %.0f → %.0f MiB (%.0f bytes per enablement), %v → %v goroutines; GET p50/p99 %.2f/%.2f ms with 1 enablement, %.2f/%.2f ms with %d",
		o.Projects, r.EnabledPerSecond, r.Before.HeapBytes/(1<<20), r.Enabled.HeapBytes/(1<<20), r.bytesPerEnablement(), r.Before.Goroutines, r.Enabled.Goroutines,
		r.GetOne.P50, r.GetOne.P99, r.GetAll.P50, r.GetAll.P99, o.Projects)
	for i := 1; i < o.Services; i++ {
		if _, err := register(i); err != nil {
			return nil, fmt.Errorf("registering service %d: %w", i, err)
		}
		if err := enable(first, i); err != nil {
			return nil, err
		}
	}
	if r.DiscoveryAll, err = timeDiscovery(); err != nil {
		return nil, err
	}
	progress("[milo] aggregated discovery of a project p50/p99: %.2f/%.2f ms with 1 service, %.2f/%.2f ms with %d",
		r.DiscoveryOne.P50, r.DiscoveryOne.P99, r.DiscoveryAll.P50, r.DiscoveryAll.P99, o.Services)
	return r, nil
}

func (c *catalogResult) bytesPerEnablement() float64 {
	return (c.Enabled.HeapBytes - c.Before.HeapBytes) / float64(max(1, c.Options.Projects-1))
}

// section reports the measurement of the service catalog.
func (c *catalogResult) section() string {
	var b strings.Builder
	o := c.Options
	fmt.Fprintf(&b, "## The service catalog\n\nA service registered on the platform; project %s enables it, then %d projects in all (one ServiceActivation each, %.0f/s); then %d services, all enabled in %s. Requests as the harness's ordinary user, one after another, %d samples each.\n\n",
		projectName(0), o.Projects, c.EnabledPerSecond, o.Services, projectName(0), o.Samples)
	b.WriteString("| | heap | goroutines | GET of the service's object p50 / p99 |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| 1 enablement | %.0f MiB | %.0f | %.2f / %.2f ms |\n", c.Before.HeapBytes/(1<<20), c.Before.Goroutines, c.GetOne.P50, c.GetOne.P99)
	fmt.Fprintf(&b, "| %d enablements | %.0f MiB | %.0f | %.2f / %.2f ms |\n", o.Projects, c.Enabled.HeapBytes/(1<<20), c.Enabled.Goroutines, c.GetAll.P50, c.GetAll.P99)
	fmt.Fprintf(&b, "\n%.0f bytes of heap per enablement; GET p99 ratio %.2f×. Aggregated discovery of the project p50 / p99: %.2f / %.2f ms with 1 service, %.2f / %.2f ms with %d.\n\n",
		c.bytesPerEnablement(), c.GetAll.P99/max(c.GetOne.P99, 0.001), c.DiscoveryOne.P50, c.DiscoveryOne.P99, c.DiscoveryAll.P50, c.DiscoveryAll.P99, o.Services)
	return b.String()
}
