package allprojects

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.miloapis.com/milo/pkg/tenancy"
)

func object(namespace, name string, annotations map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: annotations}}
}

// Keys of two projects' objects of the same namespace and name differ, and
// come back as they were, also for a project stored before storage ids
// whose name (its id) equals one of its namespaces.
func TestQualifiedKeys(t *testing.T) {
	web := map[string]string{tenancy.AnnotationKey: "web", tenancy.IDAnnotationKey: tenancy.ProjectID("1")}
	api := map[string]string{tenancy.AnnotationKey: "api", tenancy.IDAnnotationKey: tenancy.ProjectID("2")}
	legacy := map[string]string{tenancy.AnnotationKey: "team"} // its id is its name
	for _, c := range []struct {
		obj           *metav1.PartialObjectMetadata
		clusterScoped bool
		want          Key
	}{
		{object("default", "cm", web), false, Key{Project: "web", ID: tenancy.ProjectID("1"), Namespace: "default", Name: "cm"}},
		{object("default", "cm", api), false, Key{Project: "api", ID: tenancy.ProjectID("2"), Namespace: "default", Name: "cm"}},
		{object("", "default", web), true, Key{Project: "web", ID: tenancy.ProjectID("1"), Name: "default"}},
		{object("team", "cm", legacy), false, Key{Project: "team", ID: "team", Namespace: "team", Name: "cm"}},
		{object("", "team", legacy), true, Key{Project: "team", ID: "team", Name: "team"}},
		{object("default", "cm", nil), false, Key{Namespace: "default", Name: "cm"}},
	} {
		obj := any(c.obj)
		if c.want.Project != "" {
			obj, _ = Qualify(c.obj)
		}
		if c.want.Project != "" {
			// A second application (client-go's watch-list) changes nothing.
			obj, _ = Qualify(obj)
		}
		got, ok := KeyOf(obj, c.clusterScoped)
		if !ok || got != c.want {
			t.Errorf("KeyOf(%v) = %+v, want %+v", c.obj.ObjectMeta, got, c.want)
		}
		if m := obj.(metav1.Object); c.want.Project != "" && (m.GetNamespace()+"/"+m.GetName()) != c.want.StoreKey() && m.GetNamespace() != "" {
			t.Errorf("store key of %+v is %s/%s, want %s", c.want, m.GetNamespace(), m.GetName(), c.want.StoreKey())
		}
	}
	a, _ := Qualify(object("default", "cm", web))
	b, _ := Qualify(object("default", "cm", api))
	ka, _ := KeyOf(a, false)
	kb, _ := KeyOf(b, false)
	if ka.StoreKey() == kb.StoreKey() {
		t.Fatal("two projects' objects share a store key")
	}
}

// The controllers' informer of projects' CRDs keeps one copy of what CRDs
// have alike, whatever project they are in, and never mixes up two that
// differ.
func TestSlimCRDsShareWhatTheyHaveAlike(t *testing.T) {
	crd := func(ns, version string, at metav1.Time) *apiextensionsv1.CustomResourceDefinition {
		names := apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"}
		return &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.net", Namespace: ns, Annotations: map[string]string{"a": "b"}},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.net", Names: names, Scope: apiextensionsv1.NamespaceScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: version, Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object"}}}}},
			Status: apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: names, Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
				{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", LastTransitionTime: at}}},
		}
	}
	slim := func(c *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
		o, err := slimCRD(c)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*apiextensionsv1.CustomResourceDefinition)
	}
	a, b := slim(crd("id-a/a", "v1", metav1.Now())), slim(crd("id-b/b", "v1", metav1.Time{}))
	if &a.Spec.Versions[0] != &b.Spec.Versions[0] || &a.Status.Conditions[0] != &b.Status.Conditions[0] {
		t.Error("two projects' identical CRDs keep two copies of their versions or conditions")
	}
	if a.Spec.Versions[0].Schema != nil || a.Annotations != nil || !a.Status.Conditions[0].LastTransitionTime.IsZero() || a.Namespace != "id-a/a" {
		t.Errorf("slim CRD keeps more than it should: %+v", a)
	}
	if other := slim(crd("id-c/c", "v2", metav1.Time{})); other.Spec.Versions[0].Name != "v2" || &other.Spec.Versions[0] == &a.Spec.Versions[0] {
		t.Errorf("a CRD of another version reads %+v", other.Spec.Versions)
	}
}
