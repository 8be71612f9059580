package tenantstorage

import (
	"sync"
	"time"

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

// TenancyMaps gives the objects the watch caches hold one annotations map per
// project. Most of a project's objects carry no annotation but its two
// tenancy annotations, and a decoded map costs each object about 400 bytes
// (a group of eight slots, whatever it holds): ten objects a project, four
// KiB. Objects whose annotations are exactly their project's pair are given
// that project's one map instead, equal to their own; the watch caches' objects
// are never mutated (upstream copies a cached object before an update), so
// sharing a map among them changes nothing anyone can observe, as sharing
// one among watchers of one object does.
//
// It holds one entry per project an object of which entered a watch cache
// lately: an entry unused for one to two periods of tenancyMapsIdle is
// forgotten (its objects keep the map; a later one gets a new map, equal to
// it). It runs nothing of its own: entries age as objects of any project
// arrive, so while nothing arrives at all nothing is forgotten either.
//
// What this rests on: no code mutates, in place, the annotations of an
// object it read from a watch cache (upstream deep-copies a cached object
// before an update, and Milo's readers of cached objects only read). One
// that did would now change the annotations of every object of the project,
// the tenancy among them; copy first (DeepCopy) before writing to an object
// read from storage.
type TenancyMaps struct {
	mu                sync.Mutex
	now               func() time.Time
	rotated           time.Time
	current, previous map[string]map[string]string // by storage id
}

// tenancyMapsIdle is how long a project's entry is kept, at least, after
// the last of its objects entered a watch cache.
const tenancyMapsIdle = 10 * time.Minute

// NewTenancyMaps returns an empty set of shared maps.
func NewTenancyMaps() *TenancyMaps {
	return &TenancyMaps{now: time.Now, current: map[string]map[string]string{}}
}

// share points the annotations of obj, a new object of a watch cache that
// nobody else holds yet, at its project's shared map when they are exactly
// its project's tenancy pair. Unstructured objects keep theirs: their
// annotations are values in their own tree.
func (t *TenancyMaps) share(obj runtime.Object) {
	if t == nil {
		return
	}
	if _, ok := obj.(*unstructured.Unstructured); ok {
		return
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	a := m.GetAnnotations()
	if len(a) != 2 {
		return
	}
	name, id := a[tenancy.AnnotationKey], a[tenancy.IDAnnotationKey]
	if name == "" || id == "" {
		return
	}
	t.mu.Lock()
	shared := t.lookupLocked(id)
	if shared == nil || shared[tenancy.AnnotationKey] != name {
		shared = map[string]string{tenancy.AnnotationKey: name, tenancy.IDAnnotationKey: id}
		t.current[id] = shared
	}
	t.mu.Unlock()
	m.SetAnnotations(shared)
}

// lookupLocked returns project id's shared map, or nil, keeping it for
// another period; a period over, the entries unused during it move to the
// previous generation, and those of the previous one go.
func (t *TenancyMaps) lookupLocked(id string) map[string]string {
	if now := t.now(); now.Sub(t.rotated) >= tenancyMapsIdle {
		t.previous, t.current, t.rotated = t.current, map[string]map[string]string{}, now
	}
	if m, ok := t.current[id]; ok {
		return m
	}
	if m, ok := t.previous[id]; ok {
		t.current[id] = m
		return m
	}
	return nil
}
