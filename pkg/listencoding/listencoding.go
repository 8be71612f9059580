// Package listencoding writes JSON list responses item by item without
// allocating each item's encoding.
//
// The apiserver's JSON serializer streams a list one item at a time, but it
// encodes each item with json.Marshal, which returns a new byte slice: a
// list's whole size is allocated in short-lived slices as it is written. A
// tenant listing a few thousand large objects a few times a second allocates
// hundreds of megabytes a second that way, and the garbage collection that
// follows slows every other tenant's requests. The encoder here writes the
// same bytes through a json.Encoder, whose buffer is pooled, so a list costs
// what its items' slice of pointers costs.
package listencoding

import (
	"encoding/json"
	"io"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"go.miloapis.com/milo/pkg/mediatypes"
)

// jsonMediaType is the media type whose serializer is wrapped.
const jsonMediaType = runtime.ContentTypeJSON

// Wrap returns ns with its JSON serializer writing typed lists item by item
// (Serializer); every other media type, and every other object, is served by
// ns as before.
func Wrap(ns runtime.NegotiatedSerializer) runtime.NegotiatedSerializer {
	infos := append([]runtime.SerializerInfo(nil), ns.SupportedMediaTypes()...)
	for i := range infos {
		if infos[i].MediaType == jsonMediaType && infos[i].Serializer != nil {
			infos[i].Serializer = Serializer{infos[i].Serializer}
		}
	}
	return mediatypes.Serving(ns, infos)
}

// Serializer is a JSON serializer that writes a typed list (a struct of
// TypeMeta, ListMeta and Items, as every built-in list is) itself, byte for
// byte as the apiserver's streaming serializer does, and hands anything else
// to the serializer it wraps. Its identifier is the wrapped one's: the bytes
// it writes are the same.
type Serializer struct {
	runtime.Serializer
}

// Encode writes obj as JSON.
func (s Serializer) Encode(obj runtime.Object, w io.Writer) error {
	if co, ok := obj.(runtime.CacheableObject); ok {
		return co.CacheEncode(s.Identifier(), s.encode, w)
	}
	return s.encode(obj, w)
}

func (s Serializer) encode(obj runtime.Object, w io.Writer) error {
	typeMeta, listMeta, items, ok := typedList(obj)
	if !ok {
		return s.Serializer.Encode(obj, w)
	}
	return writeList(w, typeMeta, listMeta, items)
}

// typedList returns the parts of a list the apiserver's serializer writes
// item by item: a pointer to a struct of exactly TypeMeta (inline), ListMeta
// (metadata,omitempty) and items, with no JSON encoding of its own.
func typedList(obj runtime.Object) (metav1.TypeMeta, metav1.ListMeta, []runtime.Object, bool) {
	if _, ok := obj.(*unstructured.UnstructuredList); ok {
		return metav1.TypeMeta{}, metav1.ListMeta{}, nil, false
	}
	if _, ok := obj.(json.Marshaler); ok {
		return metav1.TypeMeta{}, metav1.ListMeta{}, nil, false
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return metav1.TypeMeta{}, metav1.ListMeta{}, nil, false
	}
	v = v.Elem()
	t := v.Type()
	if t.NumField() != 3 || t.Field(0).Tag.Get("json") != ",inline" || t.Field(1).Tag.Get("json") != "metadata,omitempty" ||
		t.Field(2).Tag.Get("json") != "items" {
		return metav1.TypeMeta{}, metav1.ListMeta{}, nil, false
	}
	typeMeta, ok := v.Field(0).Interface().(metav1.TypeMeta)
	if !ok {
		return metav1.TypeMeta{}, metav1.ListMeta{}, nil, false
	}
	listMeta, ok := v.Field(1).Interface().(metav1.ListMeta)
	if !ok {
		return metav1.TypeMeta{}, metav1.ListMeta{}, nil, false
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return metav1.TypeMeta{}, metav1.ListMeta{}, nil, false
	}
	return typeMeta, listMeta, items, true
}

// writeList writes {"kind":…,"apiVersion":…,"metadata":…,"items":[…]}
// and a newline.
func writeList(w io.Writer, typeMeta metav1.TypeMeta, listMeta metav1.ListMeta, items []runtime.Object) error {
	e := newEncoder(w)
	e.raw(open)
	if typeMeta.Kind != "" {
		e.pair("kind", typeMeta.Kind, comma)
	}
	if typeMeta.APIVersion != "" {
		e.pair("apiVersion", typeMeta.APIVersion, comma)
	}
	e.pair("metadata", listMeta, comma)
	if items == nil { // a nil slice: "items":null
		e.pair("items", nil, nil)
	} else {
		e.raw(itemsOpen)
		for i, item := range items {
			e.value(item)
			if i < len(items)-1 {
				e.raw(comma)
			}
		}
		e.raw(itemsClose)
	}
	e.raw(end)
	return e.err
}

// encoder writes JSON values to w as json.Marshal encodes them, through a
// json.Encoder (whose buffers are pooled), less the newline it ends each
// value with. The first error stops it.
type encoder struct {
	w   io.Writer
	enc *json.Encoder
	err error
}

func newEncoder(w io.Writer) *encoder {
	e := &encoder{w: w}
	e.enc = json.NewEncoder(valueWriter{e})
	return e
}

// valueWriter takes the json.Encoder's one write per value and drops the
// newline that ends it (a JSON value's own newlines are escaped).
type valueWriter struct{ e *encoder }

func (v valueWriter) Write(p []byte) (int, error) {
	b := p
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if _, err := v.e.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// The list's punctuation, written as is.
var (
	open       = []byte(`{`)
	comma      = []byte(`,`)
	colon      = []byte(`:`)
	itemsOpen  = []byte(`"items":[`)
	itemsClose = []byte(`]`)
	end        = []byte("}\n")
)

func (e *encoder) raw(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) value(v any) {
	if e.err == nil {
		e.err = e.enc.Encode(v)
	}
}

func (e *encoder) pair(key string, v any, suffix []byte) {
	e.value(key)
	e.raw(colon)
	e.value(v)
	if suffix != nil {
		e.raw(suffix)
	}
}
