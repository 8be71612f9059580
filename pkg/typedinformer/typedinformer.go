// Package typedinformer makes shared informers that hold Milo's own kinds
// as their Go types, read from the server's API (in protobuf) or, in the
// server, from its storage in-process.
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/jsonkind"
)

// NewClient returns a REST client of the group version gv that decodes
// into the Go types addToScheme registers. It reads protobuf, as clients of
// the apiserver's built-in kinds do, and JSON from a server that offers no
// protobuf for them (an older Milo); it writes JSON.
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
	typed.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	typed.NegotiatedSerializer = lenientSerializer{jsonkind.NewCodecFactory(scheme).WithoutConversion(), scheme}
	return rest.RESTClientFor(typed)
}

// lenientSerializer decodes as the codec factory does, but for objects
// that do not decode into their Go type (lenientDecoder).
type lenientSerializer struct {
	runtime.NegotiatedSerializer
	scheme *runtime.Scheme
}

func (s lenientSerializer) DecoderToVersion(d runtime.Decoder, gv runtime.GroupVersioner) runtime.Decoder {
	return lenientDecoder{s.NegotiatedSerializer.DecoderToVersion(d, gv), s.scheme}
}

// lenientDecoder keeps one object an informer cannot hold from stopping it.
// A custom resource's schema admits values its Go type cannot hold (a
// date-time without a zone, which metav1.Time refuses), and a typed
// decoding of a list holding one fails whole: the informer would never
// sync. Such an object is left out of a list, logged. A watch event's is
// refused as before: the watch ends, and the reflector lists again, without
// it, and watches on from there; an object changed into one its type cannot
// hold is then gone from the informer, and handed to its handlers as
// deleted, with the last state it could hold.
type lenientDecoder struct {
	runtime.Decoder
	scheme *runtime.Scheme
}

func (d lenientDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := d.Decoder.Decode(data, defaults, into)
	if err == nil || into != nil {
		// Into a given object (Result.Into) the caller wants that object or the error.
		return obj, gvk, err
	}
	u, ugvk, uerr := unstructured.UnstructuredJSONScheme.Decode(data, defaults, nil)
	if uerr != nil {
		return obj, gvk, err
	}
	list, ok := u.(*unstructured.UnstructuredList)
	if !ok {
		return obj, gvk, err
	}
	typed, nerr := d.scheme.New(*ugvk)
	lm, lerr := meta.ListAccessor(typed)
	if nerr != nil || lerr != nil {
		return obj, gvk, err
	}
	items := make([]runtime.Object, 0, len(list.Items))
	for i := range list.Items {
		item := &list.Items[i]
		o, ierr := d.scheme.New(item.GroupVersionKind())
		if ierr == nil {
			ierr = runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, o)
		}
		if ierr != nil {
			klog.ErrorS(ierr, "An object does not decode into its Go type: the informer leaves it out", "kind", item.GetKind(), "namespace", item.GetNamespace(), "name", item.GetName())
			continue
		}
		items = append(items, o)
	}
	if err := meta.SetList(typed, items); err != nil {
		return obj, gvk, err
	}
	lm.SetResourceVersion(list.GetResourceVersion())
	lm.SetContinue(list.GetContinue())
	lm.SetRemainingItemCount(list.GetRemainingItemCount())
	return typed, ugvk, nil
}

// New returns an informer of every object of resource, in every namespace,
// decoded by client into example's type. Its objects may carry no kind (a
// typed client's decoding clears a watch event's; a list's items keep
// theirs): readers take the kind from the Go type. They carry no
// managedFields, which nothing reads and which are a large part of an
// object's bytes; an update sent without
// them keeps the stored ones. slim, if set, drops more of each object
// before it is stored.
func New(client rest.Interface, resource string, example runtime.Object, resync time.Duration, indexers cache.Indexers, slim func(runtime.Object)) cache.SharedIndexInformer {
	return newInformer(cache.NewListWatchFromClient(client, resource, metav1.NamespaceAll, fields.Everything()), example, resync, indexers, slim)
}

func newInformer(lw cache.ListerWatcher, example runtime.Object, resync time.Duration, indexers cache.Indexers, slim func(runtime.Object)) cache.SharedIndexInformer {
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
