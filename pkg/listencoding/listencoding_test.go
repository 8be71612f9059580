package listencoding

import (
	"bytes"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
)

// upstream is the apiserver's JSON serializer, streaming lists as it serves them.
func upstream() runtime.Serializer { return upstreamStreaming(true) }

// upstreamStreaming is the apiserver's JSON serializer, streaming lists or
// encoding each whole.
func upstreamStreaming(streaming bool) runtime.Serializer {
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{StreamingCollectionsEncoding: streaming})
}

// failingWriter takes n bytes, then fails.
type failingWriter struct {
	n   int
	got bytes.Buffer
}

var errFull = errors.New("the connection is gone")

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.got.Len()+len(p) > w.n {
		return 0, errFull
	}
	return w.got.Write(p)
}

func configMaps(n int) []corev1.ConfigMap {
	out := make([]corev1.ConfigMap, n)
	for i := range out {
		out[i] = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: "default", ResourceVersion: "12",
			Labels: map[string]string{"b": "2", "a": "1"}, Annotations: map[string]string{"note": "<html> & \u2028 ünïcode"}},
			Data: map[string]string{"key": strings.Repeat("x\n\"y\"", 50)}, BinaryData: map[string][]byte{"bin": {0, 1, 2, 255}}}
	}
	return out
}

// TestListsAreWrittenAsUpstreamWritesThem: every list is the same bytes as
// the apiserver's own serializer writes, and anything else is left to it.
func TestListsAreWrittenAsUpstreamWritesThem(t *testing.T) {
	remaining := int64(7)
	objects := map[string]runtime.Object{
		"configmaps": &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "99", Continue: "token", RemainingItemCount: &remaining}, Items: configMaps(3)},
		"one item":    &corev1.ConfigMapList{Items: configMaps(1)},
		"no items":    &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList"}, Items: []corev1.ConfigMap{}},
		"nil items":   &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1"}},
		"no typemeta": &corev1.SecretList{Items: []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte("v")}}}},
		"pods": &corev1.PodList{Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: metav1.Unix(1700000000, 0)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}}}}}},
		"rolebindings": &rbacv1.RoleBindingList{Items: []rbacv1.RoleBinding{{ObjectMeta: metav1.ObjectMeta{Name: "rb"},
			RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"}, Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice"}}}}},
		"a list of raw objects": &corev1.List{Items: []runtime.RawExtension{{Raw: []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"raw"}}`)},
			{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "object"}}}, {}}},
		// Items whose fields encode themselves (times, quantities, raw JSON).
		"events": &corev1.EventList{Items: []corev1.Event{{ObjectMeta: metav1.ObjectMeta{Name: "e"}, FirstTimestamp: metav1.Unix(1700000000, 0),
			EventTime: metav1.NewMicroTime(time.Unix(1700000000, 5000).UTC()), Message: "</script>"}}},
		"unstructured": &unstructured.UnstructuredList{Object: map[string]any{"kind": "WidgetList", "apiVersion": "example.com/v1"},
			Items: []unstructured.Unstructured{{Object: map[string]any{"kind": "Widget", "metadata": map[string]any{"name": "w"}}}}},
		"not a list": &configMaps(1)[0],
		"a status":   &metav1.Status{Status: metav1.StatusFailure, Message: "<no>", Code: 404},
	}
	for name, obj := range objects {
		// The same bytes as upstream writes them streaming, and as it
		// writes them whole (as a group whose codecs do not stream did).
		for _, streaming := range []bool{true, false} {
			var want, got bytes.Buffer
			if err := upstreamStreaming(streaming).Encode(obj, &want); err != nil {
				t.Fatalf("%s: upstream: %v", name, err)
			}
			if err := (Serializer{upstreamStreaming(streaming)}).Encode(obj, &got); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got.String() != want.String() {
				t.Errorf("%s (upstream streaming: %v):\n got %s\nwant %s", name, streaming, got.String(), want.String())
			}
		}
	}
}

// TestAFailedWriteEndsTheList: a connection that fails part-way through a
// list ends it with the write's error and nothing more written, as upstream.
func TestAFailedWriteEndsTheList(t *testing.T) {
	list := &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"}, Items: configMaps(20)}
	for _, n := range []int{0, 1, 40, 1000, 2500} {
		want, got := &failingWriter{n: n}, &failingWriter{n: n}
		wantErr := upstream().Encode(list, want)
		err := (Serializer{upstream()}).Encode(list, got)
		if !errors.Is(err, errFull) || !errors.Is(wantErr, errFull) {
			t.Fatalf("after %d bytes: %v, upstream %v; want the write's error", n, err, wantErr)
		}
		if got.got.String() != want.got.String() {
			t.Errorf("after %d bytes, written:\n%s\nupstream:\n%s", n, got.got.String(), want.got.String())
		}
	}
}

// TestListsAllocateLessThanTheyWrite: a list of a thousand ConfigMaps of 4
// KiB is written allocating a small part of its size, where the apiserver's
// serializer allocates more than the whole list (each item's encoding in a
// new slice). What is left is what encoding/json allocates within an item
// (sorting a map's keys), the same in both.
func TestListsAllocateLessThanTheyWrite(t *testing.T) {
	items := configMaps(1000)
	for i := range items {
		items[i].Data["key"] = strings.Repeat("y", 4<<10)
	}
	list := &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"}, Items: items}
	var buf bytes.Buffer
	allocated := func(s runtime.Serializer) uint64 {
		encode := func() {
			buf.Reset()
			if err := s.Encode(list, &buf); err != nil {
				t.Fatal(err)
			}
		}
		encode() // the buffer grown, encoding/json's pool filled
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		const runs = 5
		for range runs {
			encode()
		}
		goruntime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / runs
	}
	mine, upstreams := allocated(Serializer{upstream()}), allocated(upstream())
	size := uint64(buf.Len())
	t.Logf("a list of %d bytes: %d bytes allocated here, %d upstream", size, mine, upstreams)
	if upstreams < size {
		t.Fatalf("upstream allocates %d bytes for a list of %d: the comparison no longer shows anything", upstreams, size)
	}
	if mine > size/4 {
		t.Errorf("%d bytes allocated for a list of %d, want a small part of it", mine, size)
	}
}

// TestWrapSwapsOnlyTheJSONSerializer: the negotiated serializer of an API
// group keeps every media type, with its own serializers but JSON's.
func TestWrapSwapsOnlyTheJSONSerializer(t *testing.T) {
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.WithStreamingCollectionEncodingToJSON())
	wrapped := Wrap(codecs)
	before, after := codecs.SupportedMediaTypes(), wrapped.SupportedMediaTypes()
	if len(before) != len(after) {
		t.Fatalf("%d media types, want %d", len(after), len(before))
	}
	for i := range after {
		b, a := before[i], after[i]
		if a.MediaType != b.MediaType || a.PrettySerializer != b.PrettySerializer || a.StreamSerializer != b.StreamSerializer {
			t.Errorf("%s changed beyond its serializer", a.MediaType)
		}
		_, ours := a.Serializer.(Serializer)
		if ours != (a.MediaType == runtime.ContentTypeJSON) {
			t.Errorf("%s: serializer %T", a.MediaType, a.Serializer)
		}
		if a.Serializer.Identifier() != b.Serializer.Identifier() {
			t.Errorf("%s: identifier %q, want %q", a.MediaType, a.Serializer.Identifier(), b.Serializer.Identifier())
		}
	}
	// Encoding through the group's versioning codec reaches it.
	info, _ := runtime.SerializerInfoForMediaType(after, runtime.ContentTypeJSON)
	var buf bytes.Buffer
	list := &corev1.ConfigMapList{Items: configMaps(2)}
	if err := wrapped.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion).Encode(list, &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"cm-0"`) {
		t.Errorf("encoded %s", buf.String())
	}
}
