package projectbootstrap

import (
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubernetes/pkg/apis/core"
)

// Root CA ConfigMaps decoded apart hold one copy of the bundle and of the
// description once shared; a new bundle is shared from its first ConfigMap
// on; other ConfigMaps and values are left alone.
func TestShareRootCAKeepsOneCopy(t *testing.T) {
	share := ShareRootCA()
	configMaps := schema.GroupResource{Resource: "configmaps"}
	decoded := func(name, bundle string) *core.ConfigMap {
		// strings.Clone: decoding gives every object its own copy.
		return &core.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{descriptionKey: strings.Clone(rootCADescription)}},
			Data: map[string]string{RootCAKey: strings.Clone(bundle)}}
	}
	same := func(a, b string) bool { return a == b && unsafe.StringData(a) == unsafe.StringData(b) }
	first, second := decoded(RootCAConfigMap, "CA-1"), decoded(RootCAConfigMap, "CA-1")
	share(configMaps, first)
	share(configMaps, second)
	if !same(first.Data[RootCAKey], second.Data[RootCAKey]) {
		t.Error("two root CA ConfigMaps of the same bundle hold a copy each")
	}
	if !same(second.Annotations[descriptionKey], rootCADescription) {
		t.Error("the description is a copy of its own")
	}
	other := decoded("app-config", "CA-1")
	share(configMaps, other)
	if same(other.Data[RootCAKey], first.Data[RootCAKey]) {
		t.Error("a ConfigMap of another name was changed")
	}
	rotated, next := decoded(RootCAConfigMap, "CA-2"), decoded(RootCAConfigMap, "CA-2")
	share(configMaps, rotated)
	share(configMaps, next)
	if next.Data[RootCAKey] != "CA-2" || !same(rotated.Data[RootCAKey], next.Data[RootCAKey]) {
		t.Errorf("after a new CA: %q, shared %v", next.Data[RootCAKey], same(rotated.Data[RootCAKey], next.Data[RootCAKey]))
	}
	// The external type (a codec decoding into it) is shared alike.
	external := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RootCAConfigMap}, Data: map[string]string{RootCAKey: strings.Clone("CA-2")}}
	share(configMaps, external)
	if !same(external.Data[RootCAKey], next.Data[RootCAKey]) {
		t.Error("a v1 root CA ConfigMap holds a copy of its own")
	}
}
