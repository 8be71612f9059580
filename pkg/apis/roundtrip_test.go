// Package apis_test checks the API groups' Go types against their generated
// protobuf code (hack/generate-protobuf.sh): a field the code does not know, or
// knows under another number or type, fails the round trip. It runs with or
// without protoc, so a type changed without regenerating fails here.
package apis_test

import (
	"math/rand"
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

func TestKindsRoundTripInJSONAndProtobuf(t *testing.T) {
	for name, addToScheme := range map[string]func(*runtime.Scheme) error{
		"resourcemanager": resourcemanagerv1alpha1.AddToScheme,
		"quota":           quotav1alpha1.AddToScheme,
	} {
		t.Run(name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := addToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			codecs := serializer.NewCodecFactory(scheme)
			seed := rand.Int63()
			t.Logf("seed %d", seed)
			f := fuzzer.FuzzerFor(metafuzzer.Funcs, rand.NewSource(seed), codecs)
			roundtrip.RoundTripExternalTypes(t, scheme, codecs, f, nil)
		})
	}
}
