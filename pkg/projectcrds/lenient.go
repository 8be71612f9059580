package projectcrds

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
)

// lenientRESTOptions gives a class's storage a decoder that accepts the
// objects of other classes. A class's watch cache covers its resource's
// whole key range, where other projects' objects of the same group and
// resource may have been written with another schema — another storage
// version, say — which the class's own decoder refuses; one such object
// would keep the cache from ever filling. The cache keys objects by their
// project (tenantstorage), and a class serves only its projects' keys, so
// another class's object is held, never served.
type lenientRESTOptions struct {
	generic.RESTOptionsGetter
}

func (l lenientRESTOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := l.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	inner := opts.Decorator
	opts.Decorator = func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(obj runtime.Object) (string, error),
		newFunc func() runtime.Object, newListFunc func() runtime.Object, getAttrsFunc storage.AttrFunc, triggers storage.IndexerFuncs,
		indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		c := *config
		c.Codec = lenientCodec{config.Codec}
		return inner(&c, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrsFunc, triggers, indexers)
	}
	return opts, nil
}

// lenientCodec decodes with the class's codec and, where that fails, as
// plain JSON: the object of another class.
type lenientCodec struct {
	runtime.Codec
}

func (c lenientCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := c.Codec.Decode(data, defaults, into)
	if err == nil {
		return obj, gvk, nil
	}
	u := &unstructured.Unstructured{}
	if jsonErr := u.UnmarshalJSON(data); jsonErr != nil {
		return nil, nil, err
	}
	if target, ok := into.(*unstructured.Unstructured); ok {
		target.Object = u.Object
		u = target
	}
	kind := u.GroupVersionKind()
	return u, &kind, nil
}
