package mediatypes

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

func TestServingReplacesOnlyTheMediaTypes(t *testing.T) {
	codecs := serializer.NewCodecFactory(runtime.NewScheme())
	infos := codecs.SupportedMediaTypes()[:1]
	ns := Serving(codecs, infos)
	if got := ns.SupportedMediaTypes(); len(got) != 1 || got[0].MediaType != infos[0].MediaType {
		t.Fatalf("media types %v, want only %s", got, infos[0].MediaType)
	}
	// Encoders and decoders for a version are still the wrapped factory's.
	enc := ns.EncoderForVersion(infos[0].Serializer, runtime.InternalGroupVersioner)
	want := codecs.EncoderForVersion(infos[0].Serializer, runtime.InternalGroupVersioner)
	if enc.Identifier() != want.Identifier() {
		t.Errorf("encoder %s, want the wrapped factory's %s", enc.Identifier(), want.Identifier())
	}
}
