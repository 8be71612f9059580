package jsonkind

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

// TestInterpretAnswersAsTheDefault holds MetaFactory to
// json.DefaultMetaFactory's answers and errors, on the documents it reads
// itself and on those it leaves to the default.
func TestInterpretAnswersAsTheDefault(t *testing.T) {
	docs := []string{
		// Read by the fast path.
		`{"kind":"Project","apiVersion":"resourcemanager.miloapis.com/v1alpha1","metadata":{"name":"p"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","data":{"kind":"Secret"}}`,
		` { "metadata" : {"name":"a","labels":{"kind":"x","apiVersion":"y"}}, "spec":[1,{"a":"]}"},"x\"y"],` +
			`"n":-1.5e3,"t":true,"z":null, "kind" : "Folder" ,"apiVersion":"resourcemanager.miloapis.com/v1alpha1"}`,
		`{"kind":"Project","apiVersion":"not/a/version"}`,
		`{"kind":"","apiVersion":""}`,
		// Left to the default.
		`{"kind":"Project"}`,
		`{"apiVersion":"v1"}`,
		`{}`,
		``,
		`[]`,
		`null`,
		`"kind"`,
		`{"Kind":"Project","apiVersion":"v1"}`,
		`{"KIND":"Project","kind":"Folder","apiVersion":"v1"}`,
		`{"kind":"Pro\u006aect","apiVersion":"v1"}`,
		`{"kind":"Projé","apiVersion":"v1"}`,
		`{"kind":7,"apiVersion":"v1"}`,
		`{"kind":null,"apiVersion":"v1"}`,
		`{"k\u0069nd":"Project","apiVersion":"v1"}`,
		"{\"\u212Aind\":\"Project\",\"apiVersion\":\"v1\"}", // KELVIN SIGN folds to k
		"{\"kind\":\"Project\",\"apiVer\u017Fion\":\"v1\"}", // LONG S folds to s
		"{\"kind\":\"Project\",\"apiVer\u017Fion\":\"v1\",\"apiVersion\":\"v2\"}",
		`{"kind":"Project","apiVersion":`,
		`{"kind":"Project" "apiVersion":"v1"}`,
		`{"metadata":{"name":"a"`,
		`{"metadata":"unterminated`,
		`{"kind":"Project",}`,
	}
	for _, doc := range docs {
		want, wantErr := json.DefaultMetaFactory.Interpret([]byte(doc))
		got, gotErr := MetaFactory{}.Interpret([]byte(doc))
		if (wantErr == nil) != (gotErr == nil) {
			t.Errorf("%s: error %v, the default's %v", doc, gotErr, wantErr)
			continue
		}
		if wantErr == nil && *got != *want {
			t.Errorf("%s: %v, the default's %v", doc, *got, *want)
		}
	}
}

// TestLeadingTypeMetaReadsOnlyWhatItCan names which documents the fast path
// answers (the rest go to the default).
func TestLeadingTypeMetaReadsOnlyWhatItCan(t *testing.T) {
	for doc, fast := range map[string]bool{
		`{"kind":"Project","apiVersion":"v1","metadata":{`:            true, // stops at both
		`{"metadata":{"a":[{"b":"}"}]},"kind":"K","apiVersion":"v1"}`: true,
		`{"kind":"K"}`:                             false,
		`{"Kind":"K","apiVersion":"v1"}`:           false,
		`{"kind":"K\"","apiVersion":"v1"}`:         false,
		`{"kind":"K","apiVersion":1}`:              false,
		`{"x":"\"}","kind":"K","apiVersion":"v1"}`: true,
	} {
		if _, _, ok := leadingTypeMeta([]byte(doc)); ok != fast {
			t.Errorf("%s: read by the fast path %v, want %v", doc, ok, fast)
		}
	}
}

// TestCodecFactoryDecodesAsUpstream decodes objects encoded by upstream's
// factory with both factories' JSON serializers (plain, strict and the
// version-less client decoder) and finds them equal.
func TestCodecFactoryDecodesAsUpstream(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := resourcemanagerv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	upstream := serializer.NewCodecFactory(scheme)
	ours := NewCodecFactory(scheme)
	info, ok := runtime.SerializerInfoForMediaType(upstream.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		t.Fatal("no JSON serializer")
	}
	mine, ok := runtime.SerializerInfoForMediaType(ours.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		t.Fatal("no JSON serializer of ours")
	}
	if _, ok := mine.Serializer.(*json.Serializer); !ok || mine.Serializer == info.Serializer || mine.StreamSerializer.Serializer != mine.Serializer ||
		mine.StrictSerializer == info.StrictSerializer || mine.PrettySerializer == nil {
		t.Fatalf("the JSON serializers are not replaced: %#v", mine)
	}
	objects := []runtime.Object{
		&resourcemanagerv1alpha1.Project{
			TypeMeta:   metav1.TypeMeta{Kind: "Project", APIVersion: resourcemanagerv1alpha1.SchemeGroupVersion.String()},
			ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"kind": "x"}, Annotations: map[string]string{"apiVersion": "y"}},
			Spec:       resourcemanagerv1alpha1.ProjectSpec{},
		},
		&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}, Data: map[string]string{"kind": "Secret", "x": "\"}"}},
	}
	for _, obj := range objects {
		var buf bytes.Buffer
		if err := info.Serializer.Encode(obj, &buf); err != nil {
			t.Fatal(err)
		}
		for name, pair := range map[string][2]runtime.Decoder{
			"plain":  {info.Serializer, mine.Serializer},
			"strict": {info.StrictSerializer, mine.StrictSerializer},
			"client": {upstream.WithoutConversion().DecoderToVersion(info.Serializer, nil), ours.WithoutConversion().DecoderToVersion(mine.Serializer, nil)},
		} {
			want, wantGVK, err := pair[0].Decode(buf.Bytes(), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, gotGVK, err := pair[1].Decode(buf.Bytes(), nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if *gotGVK != *wantGVK || reflect.TypeOf(got) != reflect.TypeOf(want) || !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("%s: decoded %v %#v, upstream %v %#v", name, gotGVK, got, wantGVK, want)
			}
		}
	}
	// The client's path, as client-go takes it: the negotiated serializer's
	// JSON entry, its stream serializer too.
	client, ok := runtime.SerializerInfoForMediaType(ours.WithoutConversion().SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok || client.Serializer != mine.Serializer || client.StreamSerializer.Serializer != mine.Serializer {
		t.Errorf("the client's JSON serializers are not ours: %#v", client)
	}
	// Which reader decides shows where they differ, as documented: a kind
	// repeated after both were read.
	repeated := []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"},"kind":"Secret"}`)
	if obj, _, err := mine.Serializer.Decode(repeated, nil, nil); err != nil {
		t.Error(err)
	} else if _, ok := obj.(*corev1.ConfigMap); !ok {
		t.Errorf("a repeated kind: decoded %T, want the first kind's", obj)
	}
	if obj, _, err := info.Serializer.Decode(repeated, nil, nil); err != nil {
		t.Error(err)
	} else if _, ok := obj.(*corev1.Secret); !ok {
		t.Errorf("upstream's reader decoded a repeated kind into %T, not the last kind's", obj)
	}
	// A document the fast path leaves alone decodes as upstream's too, and
	// one it reads without validating is refused by the decoding.
	for _, doc := range []string{
		`{"Kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"}}`,
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"}} trailing`,
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":`,
	} {
		_, _, wantErr := info.Serializer.Decode([]byte(doc), nil, nil)
		_, _, gotErr := mine.Serializer.Decode([]byte(doc), nil, nil)
		if (wantErr == nil) != (gotErr == nil) {
			t.Errorf("%s: error %v, upstream's %v", doc, gotErr, wantErr)
		}
	}
}

// TestUniversalDeserializerReadsJSONWithTheFactorysReader: a storage that
// writes protobuf reads what was stored as JSON with the universal
// deserializer, which must read JSON as the factory's JSON serializer does,
// and protobuf too.
func TestUniversalDeserializerReadsJSONWithTheFactorysReader(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	universal := NewCodecFactory(scheme).UniversalDeserializer()
	// Upstream's reader takes the last kind; MetaFactory the first.
	repeated := []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"},"kind":"Secret"}`)
	if obj, _, err := universal.Decode(repeated, nil, nil); err != nil {
		t.Fatal(err)
	} else if _, ok := obj.(*corev1.ConfigMap); !ok {
		t.Errorf("JSON read into %T, not by MetaFactory", obj)
	}
	var stored bytes.Buffer
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "p"}, Data: map[string]string{"k": "v"}}
	if err := protobuf.NewSerializer(scheme, scheme).Encode(cm, &stored); err != nil {
		t.Fatal(err)
	}
	if obj, _, err := universal.Decode(stored.Bytes(), nil, nil); err != nil {
		t.Fatal(err)
	} else if got, ok := obj.(*corev1.ConfigMap); !ok || got.Name != "p" || got.Data["k"] != "v" {
		t.Errorf("protobuf read as %#v", obj)
	}
}

// BenchmarkInterpret compares reading a stored Project's apiVersion and
// kind with the default's.
func BenchmarkInterpret(b *testing.B) {
	doc := []byte(`{"kind":"Project","apiVersion":"resourcemanager.miloapis.com/v1alpha1","metadata":{"name":"p-000042",` +
		`"uid":"0b9a3f6e-0f1c-4a57-9d0e-6b0e3a4c1d2f","resourceVersion":"12345","generation":1,"creationTimestamp":"2026-11-28T18:00:00Z",` +
		`"labels":{"resourcemanager.miloapis.com/organization":"org-1"},"annotations":{"a":"` + strings.Repeat("x", 400) + `"},` +
		`"finalizers":["resourcemanager.miloapis.com/project"]},"spec":{"ownerRef":{"kind":"Organization","name":"org-1"}},` +
		`"status":{"conditions":[{"type":"Ready","status":"True","reason":"Ready","message":"The project is ready","lastTransitionTime":"2026-11-28T18:00:00Z"}]}}`)
	for name, f := range map[string]json.MetaFactory{"default": json.DefaultMetaFactory, "jsonkind": MetaFactory{}} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if _, err := f.Interpret(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeProject decodes a stored Project with upstream's JSON
// serializer and with this package's (the sniffing's share of a decoding),
// and the same Project stored in protobuf, as the server now writes it.
func BenchmarkDecodeProject(b *testing.B) {
	scheme := runtime.NewScheme()
	if err := resourcemanagerv1alpha1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	doc := []byte(`{"kind":"Project","apiVersion":"resourcemanager.miloapis.com/v1alpha1","metadata":{"name":"p000000",` +
		`"uid":"aa8c98bc-d835-43fc-8a81-c50063a90624","resourceVersion":"310","generation":1,"creationTimestamp":"2026-11-28T18:00:24Z",` +
		`"labels":{"resourcemanager.miloapis.com/organization-name":"bench"},"finalizers":["resourcemanager.miloapis.com/project-cleanup",` +
		`"resourcemanager.miloapis.com/project-purge"],"managedFields":[{"manager":"Go-http-client","operation":"Update",` +
		`"apiVersion":"resourcemanager.miloapis.com/v1alpha1","time":"2026-11-28T18:00:24Z","fieldsType":"FieldsV1",` +
		`"fieldsV1":{"f:spec":{"f:ownerRef":{"f:kind":{},"f:name":{}}}}}]},"spec":{"ownerRef":{"kind":"Organization","name":"bench"}},` +
		`"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":1,"lastTransitionTime":"2026-11-28T18:00:24Z",` +
		`"reason":"ControlPlaneReady","message":"the project's control plane is initialized with namespaces default, kube-system"}],"observedGeneration":1}}`)
	decode := func(b *testing.B, s runtime.Serializer, doc []byte) {
		for b.Loop() {
			if _, _, err := s.Decode(doc, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	for name, ns := range map[string]runtime.NegotiatedSerializer{"default": serializer.NewCodecFactory(scheme), "jsonkind": NewCodecFactory(scheme)} {
		info, _ := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeJSON)
		b.Run(name, func(b *testing.B) { decode(b, info.Serializer, doc) })
	}
	info, _ := runtime.SerializerInfoForMediaType(serializer.NewCodecFactory(scheme).SupportedMediaTypes(), runtime.ContentTypeJSON)
	project, _, err := info.Serializer.Decode(doc, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	pb := protobuf.NewSerializer(scheme, scheme)
	var stored bytes.Buffer
	if err := pb.Encode(project, &stored); err != nil {
		b.Fatal(err)
	}
	b.Run("protobuf", func(b *testing.B) { decode(b, pb, stored.Bytes()) })
}
