package projectcrds

import (
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

func indexedCRD(namespace, uid string, conditions ...apiextensionsv1.CustomResourceDefinitionCondition) *apiextensionsv1.CustomResourceDefinition {
	names := apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.net", Namespace: namespace, UID: k8stypes.UID("uid-" + uid),
			Annotations: map[string]string{classAnnotation: "crdclass-forged", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			Labels:      map[string]string{"team": "a"}, Finalizers: []string{"customresourcecleanup.apiextensions.k8s.io"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.net", Scope: apiextensionsv1.NamespaceScoped, Names: names,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object"}}}}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: names, Conditions: conditions, StoredVersions: []string{"v1"}},
	}
}

// The index keeps one spec and one status for CRDs alike in many projects,
// hands out CRDs that read as the stored ones did (times of conditions
// aside), and keeps no annotation a tenant wrote: the class is the server's.
func TestIndexEntriesShareWhatCRDsHaveAlike(t *testing.T) {
	s := &Index{classes: map[Class]*classEntry{}, statuses: map[string]*statusEntry{}}
	accepted := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue,
		Reason: "NoConflicts", Message: "no conflicts found", LastTransitionTime: metav1.Now()}
	keep := func(crd *apiextensionsv1.CustomResourceDefinition) *entry {
		t.Helper()
		obj, err := s.keep(crd)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := obj.(*entry)
		if !ok {
			t.Fatalf("kept %T", obj)
		}
		return e
	}
	a, b := keep(indexedCRD("ida/a", "1", accepted)), keep(indexedCRD("idb/b", "2", accepted))
	if a.class != b.class || a.status != b.status {
		t.Fatalf("two projects' identical CRDs share class %v status %v", a.class == b.class, a.status == b.status)
	}
	if again, err := s.keep(a); err != nil || again != a {
		t.Fatalf("an entry kept again: %v %v", again, err)
	}
	crd := a.crd()
	want, _ := ClassOf(indexedCRD("ida/a", "1", accepted))
	if got := crd.Annotations[classAnnotation]; got != string(want) || len(crd.Annotations) != 1 || crd.Labels != nil {
		t.Errorf("annotations %v labels %v, want only the computed class %s", crd.Annotations, crd.Labels, want)
	}
	if crd.Name != "widgets.example.net" || crd.Namespace != "ida/a" || !reflect.DeepEqual(crd.Finalizers, []string{"customresourcecleanup.apiextensions.k8s.io"}) ||
		crd.Spec.Versions[0].Name != "v1" || crd.Status.AcceptedNames.Plural != "widgets" || crd.Status.StoredVersions[0] != "v1" ||
		len(crd.Status.Conditions) != 1 || crd.Status.Conditions[0].Reason != "NoConflicts" {
		t.Errorf("the entry reads as %+v", crd)
	}
	refused := keep(indexedCRD("idc/c", "3", apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted,
		Status: apiextensionsv1.ConditionFalse, Reason: "GroupConflict", Message: "the platform serves group example.net"}))
	if refused.status == a.status || refused.crd().Status.Conditions[0].Reason != "GroupConflict" {
		t.Errorf("a refused CRD shares the accepted status: %+v", refused.crd().Status)
	}
	// Statuses past the bound are each the entry's own.
	for i := 0; len(s.statuses) < maxShared; i++ {
		s.statuses[string(rune(i))+"x"] = &statusEntry{}
	}
	c1 := keep(indexedCRD("idd/d", "4", apiextensionsv1.CustomResourceDefinitionCondition{Type: "Odd", Status: "True"}))
	c2 := keep(indexedCRD("ide/e", "5", apiextensionsv1.CustomResourceDefinitionCondition{Type: "Odd", Status: "True"}))
	if c1.status == c2.status || len(s.statuses) > maxShared {
		t.Errorf("statuses grew past the bound: %d", len(s.statuses))
	}
}
