package tenantstorage

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/kubernetes/scheme"

	"go.miloapis.com/milo/pkg/tenancy"
)

// sameBytes reports whether two strings share their bytes.
func sameBytes(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// keyOf returns the key of m equal to key: the one the map holds.
func keyOf[V any](m map[string]V, key string) string {
	for k := range m {
		if k == key {
			return k
		}
	}
	return ""
}

// Objects decoded through a resource's storage codec hold the tenancy
// annotations' keys as the package's constants, typed or unstructured, with
// their values unchanged, and are handed to Share with their resource.
func TestDecodedObjectsShareTheTenancyKeys(t *testing.T) {
	configMaps := schema.GroupResource{Resource: "configmaps"}
	var shared []schema.GroupResource
	codec := sharingCodec{Codec: scheme.Codecs.CodecForVersions(scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion), scheme.Codecs.UniversalDeserializer(), corev1.SchemeGroupVersion, corev1.SchemeGroupVersion), resource: configMaps,
		share: func(gr schema.GroupResource, _ runtime.Object) { shared = append(shared, gr) }}
	annotations := map[string]string{tenancy.AnnotationKey: "web", tenancy.IDAnnotationKey: "p-1234", "other": "x"}
	data, err := runtime.Encode(codec, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", Annotations: annotations}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(form string, got map[string]string) {
		t.Helper()
		if len(got) != len(annotations) {
			t.Fatalf("%s: annotations %v, want %v", form, got, annotations)
		}
		for k, v := range annotations {
			if got[k] != v {
				t.Errorf("%s: annotation %s=%q, want %q", form, k, got[k], v)
			}
		}
		for _, key := range []string{tenancy.AnnotationKey, tenancy.IDAnnotationKey} {
			if !sameBytes(keyOf(got, key), key) {
				t.Errorf("%s: annotation key %s is a copy of its own", form, key)
			}
		}
	}
	obj, err := runtime.Decode(codec, data)
	if err != nil {
		t.Fatal(err)
	}
	check("typed", obj.(*corev1.ConfigMap).Annotations)

	u := &unstructured.Unstructured{}
	if _, _, err := (sharingCodec{Codec: unstructured.UnstructuredJSONScheme, resource: configMaps}).Decode(data, nil, u); err != nil {
		t.Fatal(err)
	}
	raw := u.Object["metadata"].(map[string]any)["annotations"].(map[string]any)
	typed := map[string]string{}
	for k, v := range raw {
		typed[k] = v.(string)
	}
	check("unstructured", typed)
	for _, key := range []string{tenancy.AnnotationKey, tenancy.IDAnnotationKey} {
		if !sameBytes(keyOf(raw, key), key) {
			t.Errorf("unstructured: annotation key %s is a copy of its own", key)
		}
	}
	if len(shared) != 1 || shared[0] != configMaps {
		t.Errorf("Share was given %v, want the one typed decode of configmaps", shared)
	}
}

// mapPointer tells maps apart by identity.
func mapPointer(m map[string]string) unsafe.Pointer { return reflect.ValueOf(m).UnsafePointer() }

// The objects a watch cache holds share one annotations map per project when
// their annotations are exactly the project's tenancy pair; an object with
// annotations of its own keeps its map, and every object reads as stored.
func TestCachedObjectsShareTheirProjectsAnnotations(t *testing.T) {
	s, _ := newStorage(t, "sharedmaps", Options{TenancyMaps: NewTenancyMaps()})
	for i := range 3 {
		create(t, s, in("maps-a"), "/sharedmaps", "default", fmt.Sprintf("cm-%d", i), "x")
	}
	create(t, s, in("maps-b"), "/sharedmaps", "default", "cm-0", "x")
	own := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "own", Annotations: map[string]string{"team": "web"}}}
	if err := s.Create(in("maps-a"), "/sharedmaps/default/own", own, &corev1.ConfigMap{}, 0); err != nil {
		t.Fatal(err)
	}
	all := list(t, s, tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant), "/sharedmaps", "")
	if len(all) != 5 {
		t.Fatalf("%d objects cached, want 5", len(all))
	}
	byProject := map[string]map[unsafe.Pointer]bool{}
	for _, cm := range all {
		project := cm.Annotations[tenancy.AnnotationKey]
		want := map[string]string{tenancy.AnnotationKey: project, tenancy.IDAnnotationKey: idOf(project)}
		if cm.Name == "own" {
			want["team"] = "web"
		}
		if !maps.Equal(cm.Annotations, want) {
			t.Errorf("%s/%s: annotations %v, want %v", project, cm.Name, cm.Annotations, want)
		}
		if cm.Name == "own" {
			continue
		}
		if byProject[project] == nil {
			byProject[project] = map[unsafe.Pointer]bool{}
		}
		byProject[project][mapPointer(cm.Annotations)] = true
	}
	if len(byProject["maps-a"]) != 1 || len(byProject["maps-b"]) != 1 {
		t.Fatalf("maps per project: %d in maps-a (3 objects), %d in maps-b; want one each", len(byProject["maps-a"]), len(byProject["maps-b"]))
	}
	for a := range byProject["maps-a"] {
		if byProject["maps-b"][a] {
			t.Fatal("two projects' objects share one annotations map")
		}
	}
	for _, cm := range all {
		if cm.Name == "own" && (byProject["maps-a"][mapPointer(cm.Annotations)] || byProject["maps-b"][mapPointer(cm.Annotations)]) {
			t.Fatal("an object with annotations of its own was given a shared map")
		}
	}

	// An update that writes to the annotations of the object it is handed,
	// in place, changes that object only: what it is handed is a copy.
	err := s.GuaranteedUpdate(in("maps-a"), "/sharedmaps/default/cm-0", &corev1.ConfigMap{}, false, nil,
		func(existing runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			cm := existing.(*corev1.ConfigMap)
			cm.Annotations["changed"] = "in-place"
			return cm, nil, nil
		}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list(t, s, in("maps-a"), "/sharedmaps", "") {
		want := map[string]string{tenancy.AnnotationKey: "maps-a", tenancy.IDAnnotationKey: idOf("maps-a")}
		switch cm.Name {
		case "own":
			want["team"] = "web"
		case "cm-0":
			want["changed"] = "in-place"
		}
		if !maps.Equal(cm.Annotations, want) {
			t.Errorf("after an update of cm-0 that changed its annotations in place, %s has %v, want %v", cm.Name, cm.Annotations, want)
		}
	}
}

// A project's shared map is kept while its objects keep arriving, and
// forgotten once none has for two periods: nothing is kept for a project
// gone, and a later object gets a new map equal to the old.
func TestTenancyMapsForgetIdleProjects(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	tm := NewTenancyMaps()
	tm.now = func() time.Time { return now }
	object := func(project string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Annotations: map[string]string{
			tenancy.AnnotationKey: project, tenancy.IDAnnotationKey: idOf(project)}}}
	}
	shared := func(project string) unsafe.Pointer {
		o := object(project)
		tm.share(o)
		return mapPointer(o.Annotations)
	}
	first := shared("busy")
	idle := shared("idle")
	for range 3 {
		now = now.Add(tenancyMapsIdle)
		if got := shared("busy"); got != first {
			t.Fatal("a project whose objects keep arriving got a new map")
		}
	}
	if got := shared("idle"); got == idle {
		t.Fatal("a project idle for three periods kept its map")
	}
	tm.mu.Lock()
	entries := len(tm.current) + len(tm.previous)
	tm.mu.Unlock()
	if entries > 3 {
		t.Errorf("%d entries kept for two projects", entries)
	}
	// Not shared: another project's name under one id, other annotations.
	renamed := object("busy")
	renamed.Annotations[tenancy.AnnotationKey] = "other-name"
	tm.share(renamed)
	if mapPointer(renamed.Annotations) == first || renamed.Annotations[tenancy.AnnotationKey] != "other-name" {
		t.Error("an object naming another project under one id was given that project's map")
	}
	extra := object("busy")
	extra.Annotations["x"] = "y"
	before := mapPointer(extra.Annotations)
	tm.share(extra)
	if mapPointer(extra.Annotations) != before {
		t.Error("an object with an annotation of its own was given a shared map")
	}
}
