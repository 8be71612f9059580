package tenantstorage

import (
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
