// Package typedinformer makes shared informers that hold Milo's own kinds
// as their Go types, read over JSON from the server's API.
//
// Milo's kinds have no generated clientsets, and a dynamic informer holds
// each object as an unstructured tree of maps: about three times the bytes
// of the struct, and a conversion (reflection over the whole object) for
// every reader that wants the struct. Where a kind is held once per project
// or per charged object (the hierarchy's, quota grants and claims), the
// platform's informers hold the struct instead.
package typedinformer

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// NewClient returns a REST client of the group version gv that decodes
// into the Go types addToScheme registers. It speaks JSON only: Milo's
// types have no protobuf encoding.
func NewClient(config *rest.Config, gv schema.GroupVersion, addToScheme func(*runtime.Scheme) error) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := addToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	typed := rest.CopyConfig(config)
	typed.GroupVersion = &gv
	typed.APIPath = "/apis"
	typed.ContentType = runtime.ContentTypeJSON
	typed.AcceptContentTypes = runtime.ContentTypeJSON
	typed.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	return rest.RESTClientFor(typed)
}

// New returns an informer of every object of resource, in every namespace,
// decoded by client into example's type. Its objects carry no kind (a typed
// client's decoding clears it) and no managedFields, which nothing reads
// and which are a large part of an object's bytes; an update sent without
// them keeps the stored ones. slim, if set, drops more of each object
// before it is stored.
func New(client rest.Interface, resource string, example runtime.Object, resync time.Duration, indexers cache.Indexers, slim func(runtime.Object)) cache.SharedIndexInformer {
	lw := cache.NewListWatchFromClient(client, resource, metav1.NamespaceAll, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, example, resync, indexers)
	// SetTransform fails only once the informer runs.
	_ = inf.SetTransform(func(obj any) (any, error) {
		DropManagedFields(obj)
		if o, ok := obj.(runtime.Object); ok && slim != nil {
			slim(o)
		}
		return obj, nil
	})
	return inf
}

// DropManagedFields clears obj's managedFields, if it is an object.
func DropManagedFields(obj any) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
}
