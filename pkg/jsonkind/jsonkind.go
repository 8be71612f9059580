// Package jsonkind reads a JSON object's apiVersion and kind without
// decoding the rest of it, for the JSON that Milo's own encoders wrote.
//
// The apiserver's JSON serializer learns what to decode into by unmarshaling
// the whole document with encoding/json into a struct of two fields: a full
// validating scan, and a second one skipping every other value, before the
// decoding proper scans it again. For the kinds Milo stored as JSON (the
// hierarchy's and the quota's, written in protobuf since; what was stored
// before is read as it is) that sniffing was about as costly as the
// decoding: at 100,000 projects a restart spent 4 of 48 CPU-seconds of its
// profile in it, reading each Project twice (its watch cache, the hierarchy's
// informers). Kubernetes' encoders write kind and apiVersion first, each
// once, so both are found in the document's first bytes.
package jsonkind

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/recognizer"

	"go.miloapis.com/milo/pkg/mediatypes"
)

// MetaFactory reads apiVersion and kind from a JSON object's top-level keys
// in order, stopping once it has both. Until then, anything it does not read
// plainly (a key or value with escapes or non-ASCII bytes, a key that matches
// either only ignoring case, a value that is not a string, a document
// without both) is left to json.DefaultMetaFactory. It answers as that
// default does, with one difference: it reads nothing after both, so a later
// key that is either again (exactly, ignoring case, or escaped), which
// encoding/json would take instead, or would refuse (a number), is not seen.
// Kubernetes' encoders write each key once. Nor does it validate what it
// skips: the serializer's decoding, which follows, does (not into a
// runtime.Unknown, which keeps the bytes undecoded; nothing here decodes so).
//
// A document without both at its top (a watch event: type and object) is
// skipped through once before the default reads it: a byte loop, a
// fraction of the default's own scan.
type MetaFactory struct{}

var _ json.MetaFactory = MetaFactory{}

// Interpret returns the group, version and kind data names.
func (MetaFactory) Interpret(data []byte) (*schema.GroupVersionKind, error) {
	apiVersion, kind, ok := leadingTypeMeta(data)
	if !ok {
		return json.DefaultMetaFactory.Interpret(data)
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	return &schema.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: kind}, nil
}

// leadingTypeMeta scans data's top-level object key by key until it has
// read apiVersion and kind; false where the default must decide.
func leadingTypeMeta(data []byte) (apiVersion, kind string, ok bool) {
	i := space(data, 0)
	if i >= len(data) || data[i] != '{' {
		return "", "", false
	}
	i++
	var haveVersion, haveKind bool
	for {
		key, next, ok := plainString(data, space(data, i))
		if !ok {
			return "", "", false
		}
		i = space(data, next)
		if i >= len(data) || data[i] != ':' {
			return "", "", false
		}
		i = space(data, i+1)
		switch {
		case key == "apiVersion" || key == "kind":
			value, next, ok := plainString(data, i)
			if !ok {
				return "", "", false
			}
			if key == "kind" {
				kind, haveKind = value, true
			} else {
				apiVersion, haveVersion = value, true
			}
			i = next
		case strings.EqualFold(key, "apiVersion") || strings.EqualFold(key, "kind"):
			// encoding/json matches keys ignoring case, and which one
			// wins is the last: its decision.
			return "", "", false
		default:
			if i, ok = skipValue(data, i); !ok {
				return "", "", false
			}
		}
		if haveVersion && haveKind {
			return apiVersion, kind, true
		}
		i = space(data, i)
		if i >= len(data) || data[i] != ',' {
			return "", "", false
		}
		i++
	}
}

// space returns the index of the first byte at or after i that is not JSON
// whitespace.
func space(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// plainString reads the JSON string at data[i] if it holds ASCII at or
// above 0x20 only and no escape, returning it and the index after its closing quote.
func plainString(data []byte, i int) (string, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return string(data[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", 0, false
		}
	}
	return "", 0, false
}

// skipValue returns the index after the JSON value at data[i]: a string,
// an object or array (brackets counted outside strings), or a literal or
// number (up to the next delimiter). It does not validate.
func skipValue(data []byte, i int) (int, bool) {
	if i >= len(data) {
		return 0, false
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				next, ok := skipString(data, i)
				if !ok {
					return 0, false
				}
				i = next
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	default:
		start := i
		for i < len(data) {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i, i > start
			}
			i++
		}
		return 0, false
	}
}

// skipString returns the index after the JSON string at data[i].
func skipString(data []byte, i int) (int, bool) {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// CodecFactory is serializer.NewCodecFactory(scheme) whose SupportedMediaTypes
// (and WithoutConversion's) have JSON serializers reading apiVersion and kind
// with MetaFactory, built with the options NewCodecFactory gives its own by
// default. It is a runtime.StorageSerializer (for a storage factory's JSON
// resources) and a NegotiatedSerializer (for clients). Its
// UniversalDeserializer reads JSON with MetaFactory too: a storage writing
// protobuf reads with it what was stored as JSON. Every other media type, all
// encoding, and the factory's other decoders (LegacyCodec, ...) are
// upstream's.
type CodecFactory struct {
	serializer.CodecFactory
	infos []runtime.SerializerInfo
}

// NewCodecFactory returns the codec factory of scheme, reading JSON with
// MetaFactory.
func NewCodecFactory(scheme *runtime.Scheme) CodecFactory {
	f := serializer.NewCodecFactory(scheme)
	infos := append([]runtime.SerializerInfo(nil), f.SupportedMediaTypes()...)
	for i := range infos {
		if infos[i].MediaType != runtime.ContentTypeJSON {
			continue
		}
		// The options serializer.NewCodecFactory gives its own, by default.
		plain := json.NewSerializerWithOptions(MetaFactory{}, scheme, scheme, json.SerializerOptions{})
		infos[i].Serializer = plain
		infos[i].StrictSerializer = json.NewSerializerWithOptions(MetaFactory{}, scheme, scheme, json.SerializerOptions{Strict: true})
		if infos[i].PrettySerializer != nil {
			infos[i].PrettySerializer = json.NewSerializerWithOptions(MetaFactory{}, scheme, scheme, json.SerializerOptions{Pretty: true})
		}
		if s := infos[i].StreamSerializer; s != nil {
			stream := *s
			stream.Serializer = plain
			infos[i].StreamSerializer = &stream
		}
	}
	return CodecFactory{CodecFactory: f, infos: infos}
}

// SupportedMediaTypes returns the factory's serializers, JSON's replaced.
func (f CodecFactory) SupportedMediaTypes() []runtime.SerializerInfo { return f.infos }

// UniversalDeserializer decodes any of the factory's media types, each
// recognized by its first bytes, JSON with MetaFactory; without conversion or
// defaulting, as serializer.CodecFactory's.
func (f CodecFactory) UniversalDeserializer() runtime.Decoder {
	decoders := make([]runtime.Decoder, len(f.infos))
	for i, info := range f.infos {
		decoders[i] = info.Serializer
	}
	return recognizer.NewDecoder(decoders...)
}

// WithoutConversion is serializer.CodecFactory's, with these serializers.
func (f CodecFactory) WithoutConversion() runtime.NegotiatedSerializer {
	return mediatypes.Serving(f.CodecFactory.WithoutConversion(), f.infos)
}
