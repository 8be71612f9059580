package server

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TestStoredDefinitionsAreUpToDate: a definition as the server stores it
// (with its defaults) is what Milo wants, and one whose schema or names
// differ is not.
func TestStoredDefinitionsAreUpToDate(t *testing.T) {
	want, err := servedAsCustomResources()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatal("no definitions")
	}
	for _, crd := range want {
		stored := crd.DeepCopy()
		apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(stored)
		if crd.Spec.Conversion == nil && stored.Spec.Conversion == nil {
			t.Fatalf("%s: the server's defaults set no conversion strategy; this test no longer checks that defaults are compared alike", crd.Name)
		}
		if !upToDate(stored, crd) {
			t.Errorf("%s as stored, with its defaults, is not up to date", crd.Name)
		}
		changed := stored.DeepCopy()
		changed.Spec.Names.ShortNames = append(changed.Spec.Names.ShortNames, "changed")
		if upToDate(changed, crd) {
			t.Errorf("%s with another short name is up to date", crd.Name)
		}
		changed = stored.DeepCopy()
		changed.Spec.Versions[0].Schema.OpenAPIV3Schema.Description += " (changed)"
		if upToDate(changed, crd) {
			t.Errorf("%s with another schema is up to date", crd.Name)
		}
		changed = stored.DeepCopy()
		changed.Annotations = map[string]string{"changed": "yes"}
		if upToDate(changed, crd) {
			t.Errorf("%s with other annotations is up to date", crd.Name)
		}
	}
}
