// Package mediatypes makes a NegotiatedSerializer that serves some media
// types with serializers of its own: the apiserver and client-go pick a
// serializer from SupportedMediaTypes, so replacing an entry there is how
// one media type's encoding or decoding is changed while the rest, and the
// encoders and decoders for versions, stay the wrapped one's.
package mediatypes

import "k8s.io/apimachinery/pkg/runtime"

// Serving returns ns serving infos as its media types.
func Serving(ns runtime.NegotiatedSerializer, infos []runtime.SerializerInfo) runtime.NegotiatedSerializer {
	return negotiated{NegotiatedSerializer: ns, infos: infos}
}

type negotiated struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func (n negotiated) SupportedMediaTypes() []runtime.SerializerInfo { return n.infos }
