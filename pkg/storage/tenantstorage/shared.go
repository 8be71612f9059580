package tenantstorage

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Decoding gives every object its own copy of every string it holds: the watch
// cache of a resource keeps as many copies of a value as objects hold it. For
// the values Milo puts into objects by the hundred thousand, sharingCodec
// points each decoded object at one copy instead — the tenancy annotations'
// keys on every object of a project, and whatever Options.Share names (the
// root CA bundle each namespace holds). Cached objects are never mutated, and a
// string is immutable, so sharing it changes nothing anyone can observe.

// sharingCodec is a resource's storage codec whose decoded objects share the
// values above.
type sharingCodec struct {
	runtime.Codec
	resource schema.GroupResource
	share    func(schema.GroupResource, runtime.Object)
}

func (c sharingCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := c.Codec.Decode(data, defaults, into)
	if err != nil || obj == nil {
		return obj, gvk, err
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		// Its GetAnnotations makes a copy: share in the object's own map.
		if m, ok := u.Object["metadata"].(map[string]any); ok {
			if a, ok := m["annotations"].(map[string]any); ok {
				shareKeys(a)
			}
		}
	} else if m, err := meta.Accessor(obj); err == nil {
		shareKeys(m.GetAnnotations())
	}
	if c.share != nil {
		c.share(c.resource, obj)
	}
	return obj, gvk, err
}

// shareKeys makes the tenancy annotations' keys the package's constants:
// assigning to a map's existing string key stores the key given.
func shareKeys[V any](annotations map[string]V) {
	for _, key := range [...]string{tenancy.AnnotationKey, tenancy.IDAnnotationKey} {
		if v, ok := annotations[key]; ok {
			annotations[key] = v
		}
	}
}
