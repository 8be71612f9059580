package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// crdOptions size the measurement of projects' own CRDs. Milo: each project
// defines the CRDs itself. The baseline, which has no projects to define
// CRDs in, stores the same objects in each project's namespace — each CRD's
// manifest in a ConfigMap of its own beside one instance of the platform's
// CRD of that schema — so that the difference between the two is what Milo
// spends beyond storing the objects; and for each unique schema it installs
// a platform CRD of its own (upstream's cost per CRD: a handler and a watch
// cache each, as kcp pays per CRD per workspace).
type crdOptions struct {
	// Projects each define PerProject CRDs of the same schemas and one instance of each.
	Projects, PerProject int
	// Unique projects (after those) each define one CRD of a schema of its own.
	Unique int
	// Samples CRDs are timed from create to Established.
	Samples int
}

// crdResult is the measurement of projects' own CRDs.
type crdResult struct {
	Options crdOptions
	// Before, Shared and Unique are the server's footprint before any
	// project CRD, after the shared ones, and after the unique ones; Half
	// after half the projects defined the shared ones, so that what each
	// further project adds is measured apart from what the first ones fill
	// once (admission pools, buffers, etcd's raft log).
	Before, Half, Shared, Unique resources
	// SharedPerSecond and UniquePerSecond are CRDs (and their instances) made per second.
	SharedPerSecond, UniquePerSecond float64
	// Established is create → Established of sampled CRDs (milliseconds).
	Established quantiles
}

// crdFor is the i-th of the CRDs every project defines alike, or, with
// unique, one whose schema is that project's own.
func crdFor(i int, unique string) *apiextensionsv1.CustomResourceDefinition {
	plural := fmt.Sprintf("widgets%d", i)
	props := map[string]apiextensionsv1.JSONSchemaProps{
		"size":  {Type: "integer", Default: &apiextensionsv1.JSON{Raw: []byte("1")}},
		"color": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"red"`)}, {Raw: []byte(`"blue"`)}}},
		"tags":  {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}},
	}
	description := "a widget"
	if unique != "" {
		description = "a widget of project " + unique
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".bench.example.net"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "bench.example.net", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: fmt.Sprintf("widget%d", i), Kind: fmt.Sprintf("Widget%d", i)},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Description: description,
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: props,
						XValidations: apiextensionsv1.ValidationRules{{Rule: "self.size >= 0", Message: "size is not negative"}}}}}}}},
		},
	}
}

// measureProjectCRDs makes projects [0, Projects) define the same CRDs with
// one instance each, then projects [Projects, Projects+Unique) one CRD of a
// schema of their own, measuring the server after each.
func measureProjectCRDs(ctx context.Context, s *system, o crdOptions, settle time.Duration, dir string) (*crdResult, error) {
	r := &crdResult{Options: o}
	var err error
	var mu sync.Mutex
	var established latencies
	// install defines crd where cfg points (a project in Milo, the platform
	// in the baseline) and waits for it to be Established.
	install := func(cfg *rest.Config, project string, crd *apiextensionsv1.CustomResourceDefinition, timed bool) error {
		client, err := apiextensionsclient.NewForConfigAndClient(cfg, s.http)
		if err != nil {
			return err
		}
		began := time.Now()
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return slices.ContainsFunc(got.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
				return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
			}), nil
		})
		if err != nil {
			return fmt.Errorf("%s of project %s not established: %w", crd.Name, project, err)
		}
		if timed {
			mu.Lock()
			established = append(established, time.Since(began))
			mu.Unlock()
		}
		return nil
	}
	// instance makes project's one object of crd's kind, once it is served.
	instance := func(project string, crd *apiextensionsv1.CustomResourceDefinition) error {
		dyn, err := dynamic.NewForConfigAndClient(s.projectConfig(project), s.http)
		if err != nil {
			return err
		}
		gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: "v1", Resource: crd.Spec.Names.Plural}
		// The server serves the kind once its own index has seen the CRD
		// established, a moment after the CRD says so (as upstream's handler).
		return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(gvr).Namespace(s.namespaceOf(project)).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": crd.Spec.Group + "/v1", "kind": crd.Spec.Names.Kind, "metadata": map[string]any{"name": "one"},
				"spec": map[string]any{"color": "red", "tags": []any{"a", "b"}}}}, metav1.CreateOptions{})
			switch {
			case err == nil || apierrors.IsAlreadyExists(err):
				return true, nil
			case apierrors.IsNotFound(err):
				return false, nil
			}
			return false, err
		})
	}
	define := func(project string, crd *apiextensionsv1.CustomResourceDefinition, timed bool) error {
		if err := install(s.projectConfig(project), project, crd, timed); err != nil {
			return err
		}
		return instance(project, crd)
	}
	if !s.isMilo() {
		// The platform's CRDs of the shared schemas, once.
		for i := range o.PerProject {
			if err := install(s.config, "", crdFor(i, ""), false); err != nil {
				return nil, err
			}
		}
		cms, err := kubernetes.NewForConfigAndClient(s.config, s.http)
		if err != nil {
			return nil, err
		}
		define = func(project string, crd *apiextensionsv1.CustomResourceDefinition, _ bool) error {
			manifest, err := json.Marshal(crd)
			if err != nil {
				return err
			}
			_, err = cms.CoreV1().ConfigMaps(project).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "crd-" + crd.Name},
				Data: map[string]string{"crd": string(manifest)}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			return instance(project, crd)
		}
	}
	if r.Before, err = s.measure(ctx, filepath.Join(dir, "crds-heap-before.pprof")); err != nil {
		return nil, err
	}
	every := max(1, o.Projects*o.PerProject/max(1, o.Samples))
	var took time.Duration
	half := o.Projects / 2
	for _, span := range [][2]int{{0, half}, {half, o.Projects}} {
		began := time.Now()
		err = parallel(ctx, "project CRDs defined", span[0]*o.PerProject, span[1]*o.PerProject, 32, func(i int) error {
			return define(projectName(i/o.PerProject), crdFor(i%o.PerProject, ""), i%every == 0)
		})
		if err != nil {
			return nil, err
		}
		took += time.Since(began)
		if span[0] == 0 && half > 0 {
			if settle > 0 {
				time.Sleep(settle)
			}
			if r.Half, err = s.measure(ctx, filepath.Join(dir, "crds-heap-half.pprof")); err != nil {
				return nil, err
			}
		}
	}
	r.SharedPerSecond = float64(o.Projects*o.PerProject) / took.Seconds()
	slices.Sort(established)
	r.Established = quantiles{P50: ms(established.quantile(0.5)), P99: ms(established.quantile(0.99))}
	if settle > 0 {
		time.Sleep(settle)
	}
	if r.Shared, err = s.measure(ctx, filepath.Join(dir, "crds-heap-shared.pprof")); err != nil {
		return nil, err
	}
	progress("[%s] %d projects × %d CRDs: heap %.0f → %.0f MiB (%.2f KiB per project), %v → %v goroutines, %v → %v etcd watches; %.0f CRDs/s; Established p50 %.0f / p99 %.0f ms",
		s.name, o.Projects, o.PerProject, r.Before.HeapBytes/(1<<20), r.Shared.HeapBytes/(1<<20), (r.Shared.HeapBytes-r.Before.HeapBytes)/1024/float64(max(1, o.Projects)),
		r.Before.Goroutines, r.Shared.Goroutines, r.Before.EtcdWatches, r.Shared.EtcdWatches, r.SharedPerSecond, r.Established.P50, r.Established.P99)
	if o.Unique > 0 {
		began := time.Now()
		err = parallel(ctx, "unique project CRDs defined", o.Projects, o.Projects+o.Unique, 32, func(i int) error {
			if !s.isMilo() {
				// A platform CRD of its own name: the platform has one namespace of names.
				crd := crdFor(0, projectName(i))
				crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets" + projectName(i), Singular: "widget" + projectName(i), Kind: "Widget" + strings.ToUpper(projectName(i))}
				crd.Name = crd.Spec.Names.Plural + "." + crd.Spec.Group
				if err := install(s.config, "", crd, i%max(1, o.Unique/max(1, o.Samples)) == 0); err != nil {
					return err
				}
				return instance(projectName(i), crd)
			}
			return define(projectName(i), crdFor(0, projectName(i)), false)
		})
		if err != nil {
			return nil, err
		}
		r.UniquePerSecond = float64(o.Unique) / time.Since(began).Seconds()
		if settle > 0 {
			time.Sleep(settle)
		}
		if r.Unique, err = s.measure(ctx, filepath.Join(dir, "crds-heap-unique.pprof")); err != nil {
			return nil, err
		}
		if !s.isMilo() {
			// The baseline's CRDs timed are its platform CRDs of unique schemas.
			slices.Sort(established)
			r.Established = quantiles{P50: ms(established.quantile(0.5)), P99: ms(established.quantile(0.99))}
		}
		progress("[%s] %d projects with a schema of their own: heap %.0f → %.0f MiB (%.1f KiB per schema), %v → %v goroutines, %v → %v etcd watches",
			s.name, o.Unique, r.Shared.HeapBytes/(1<<20), r.Unique.HeapBytes/(1<<20), (r.Unique.HeapBytes-r.Shared.HeapBytes)/1024/float64(o.Unique),
			r.Shared.Goroutines, r.Unique.Goroutines, r.Shared.EtcdWatches, r.Unique.EtcdWatches)
	}
	return r, nil
}
