package tenantstate

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"
)

// configMaps records what the reader asked of it.
type configMaps struct{ namespace *string }

func (configMaps) New() runtime.Object     { return &api.ConfigMap{} }
func (configMaps) NewList() runtime.Object { return &api.ConfigMapList{} }
func (configMaps) Destroy()                {}
func (c configMaps) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	*c.namespace, _ = genericapirequest.NamespaceFrom(ctx)
	return &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: opts.ResourceVersion}}, nil
}
func (c configMaps) List(ctx context.Context, _ *metainternalversion.ListOptions) (runtime.Object, error) {
	*c.namespace, _ = genericapirequest.NamespaceFrom(ctx)
	return &api.ConfigMapList{}, nil
}
func (configMaps) ConvertToTable(context.Context, runtime.Object, runtime.Object) (*metav1.Table, error) {
	return nil, nil
}

// Reads before the storages are installed answer 503; after, they reach the
// storage of the resource asked, in the namespace asked, from the cache when asked.
func TestReaderReadsThroughInstalledStorages(t *testing.T) {
	r := New()
	gr := api.Resource("configmaps")
	if _, err := r.Get(context.Background(), gr, "team", "settings", FromCache); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("before Install: %v, want 503", err)
	}
	var ns string
	r.Install("", map[string]rest.Storage{"configmaps": configMaps{&ns}})
	obj, err := r.Get(context.Background(), gr, "team", "settings", FromCache)
	if err != nil || obj.(*api.ConfigMap).ResourceVersion != "0" || ns != "team" {
		t.Fatalf("Get: %v %v in namespace %q", obj, err, ns)
	}
	if _, err := r.List(context.Background(), gr, "other"); err != nil || ns != "other" {
		t.Fatalf("List: %v in namespace %q", err, ns)
	}
	if _, err := r.Update(context.Background(), gr, "team", "settings", &api.ConfigMap{}); err == nil {
		t.Fatal("Update through a storage that cannot update succeeded")
	}
	if _, err := r.Get(context.Background(), api.Resource("secrets"), "team", "x", FromCache); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("a resource not installed: %v, want 503", err)
	}
}
