package server

import (
	"context"
	"fmt"
	"path"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/apis/crds"
	"go.miloapis.com/milo/pkg/registry"
	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/tenancy"
)

// MiloCRDs returns the CustomResourceDefinitions generated from Milo's API
// types: the kinds the server serves as custom resources, and those it serves
// from typed storage (package registry), whose definitions describe the same API.
func MiloCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) { return crds.All() }

// servedAsCustomResources are the definitions the server installs: all but
// the kinds it serves from typed storage.
func servedAsCustomResources() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	all, err := crds.All()
	if err != nil {
		return nil, err
	}
	typed := sets.New(registry.Resources()...)
	return slices.DeleteFunc(all, func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		return typed.Has(schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural})
	}), nil
}

// retireCRDs deletes from storage the definitions an earlier Milo installed
// for the kinds now served from typed storage, before anything reads them.
// It deletes their keys, not the objects through the API: a definition
// deleted through the API takes every object of its kind with it. The
// objects themselves stay where they are, read as they are by the typed
// storage.
func retireCRDs(ctx context.Context, keys keyranges.Store, storagePrefix string) error {
	for _, gr := range registry.Resources() {
		key := path.Join("/", storagePrefix, "apiextensions.k8s.io/customresourcedefinitions", tenancy.PlatformSegment, gr.Resource+"."+gr.Group)
		deleted, err := keys.Delete(ctx, key)
		if err != nil {
			return fmt.Errorf("retiring the CustomResourceDefinition of %s: %w", gr, err)
		}
		if !deleted {
			// kine answers a delete it could not write (a concurrent
			// write) as nothing deleted: the key must be gone either way.
			if left, err := keys.Exists(ctx, key); err != nil || left {
				return fmt.Errorf("retiring the CustomResourceDefinition of %s: it is still stored (%v)", gr, err)
			}
			continue
		}
		klog.InfoS("Retired the CustomResourceDefinition of a kind now served from typed storage", "resource", gr)
	}
	return nil
}

// InstallCRDs creates Milo's CRDs, or brings existing ones up to date with this
// binary, and waits until every one is Established and served.
func InstallCRDs(ctx context.Context, loopback *rest.Config) error {
	want, err := servedAsCustomResources()
	if err != nil {
		return err
	}
	client, err := apiextensionsclient.NewForConfig(loopback)
	if err != nil {
		return err
	}
	crdClient := client.ApiextensionsV1().CustomResourceDefinitions()
	// What is stored is read from the watch cache, in one paged list: at a start
	// the definitions are nearly always as wanted, and a read of each from
	// etcd, while the watch caches fill, takes a tenth of a second or more.
	// Only a definition that differs is read again from etcd and written.
	var stored map[string]*apiextensionsv1.CustomResourceDefinition
	// The loopback connection may not accept requests for a moment after start.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		stored, err = cachedCRDs(ctx, crdClient)
		if err != nil {
			klog.V(2).InfoS("Retrying the list of CRDs", "err", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("listing CRDs: %w", err)
	}
	written := 0
	for _, crd := range want {
		if got := stored[crd.Name]; got != nil && upToDate(got, crd) {
			continue
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			wrote, err := applyCRD(ctx, crdClient, crd)
			if err != nil {
				klog.V(2).InfoS("Retrying CRD installation", "crd", crd.Name, "err", err)
				return false, nil
			}
			if wrote {
				written++
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", crd.Name, err)
		}
	}
	// notEstablished names the wanted definitions stored lacks or holds
	// not yet Established.
	notEstablished := func() []string {
		var names []string
		for _, crd := range want {
			if got := stored[crd.Name]; got == nil || !isEstablished(got) {
				names = append(names, crd.Name)
			}
		}
		return names
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		listed, err := cachedCRDs(ctx, crdClient)
		if err != nil {
			return false, nil
		}
		stored = listed
		return len(notEstablished()) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRDs %v to be established: %w", notEstablished(), err)
	}
	klog.InfoS("Milo CRDs are established", "count", len(want), "written", written)
	return nil
}

type crdInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*apiextensionsv1.CustomResourceDefinition, error)
	List(ctx context.Context, opts metav1.ListOptions) (*apiextensionsv1.CustomResourceDefinitionList, error)
	Create(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, opts metav1.CreateOptions) (*apiextensionsv1.CustomResourceDefinition, error)
	Update(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, opts metav1.UpdateOptions) (*apiextensionsv1.CustomResourceDefinition, error)
}

// cachedCRDs lists the stored definitions from the watch cache, by name.
// It asks in pages: a watch cache still filling at start answers a list
// without a limit with 429 (and a wait), one with a limit from etcd.
func cachedCRDs(ctx context.Context, c crdInterface) (map[string]*apiextensionsv1.CustomResourceDefinition, error) {
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	lister := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, opts) })
	lister.PageSize = 500
	err := lister.EachListItem(ctx, metav1.ListOptions{ResourceVersion: "0"}, func(obj runtime.Object) error {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			return fmt.Errorf("listing CRDs: got a %T", obj)
		}
		byName[crd.Name] = crd
		return nil
	})
	return byName, err
}

// upToDate tells whether the stored definition got is want. The stored one
// carries the server's defaults (a conversion strategy, say), so want is
// compared defaulted alike: compared as it is, every start would rewrite
// every definition, and the first write waits for admission to be ready
// (seconds at 100,000 projects) while the informers that need the
// definitions wait for it.
func upToDate(got, want *apiextensionsv1.CustomResourceDefinition) bool {
	defaulted := want.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(defaulted)
	return apiequality.Semantic.DeepEqual(got.Spec, defaulted.Spec) && apiequality.Semantic.DeepEqual(got.Annotations, want.Annotations)
}

// applyCRD creates want or brings the stored definition up to date with it,
// and reports whether it wrote.
func applyCRD(ctx context.Context, c crdInterface, want *apiextensionsv1.CustomResourceDefinition) (bool, error) {
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wrote = false
		got, err := c.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			wrote = true
			_, err = c.Create(ctx, want.DeepCopy(), metav1.CreateOptions{FieldManager: "milo"})
			return err
		}
		if err != nil {
			return err
		}
		if upToDate(got, want) {
			return nil
		}
		updated := got.DeepCopy()
		updated.Spec = want.Spec
		updated.Annotations = want.Annotations
		wrote = true
		_, err = c.Update(ctx, updated, metav1.UpdateOptions{FieldManager: "milo"})
		return err
	})
	return wrote, err
}

func isEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
