package objectview

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

// TestTypedObjectsAreReadAndTheirMetadataWrittenBack: a plugin reads a typed
// object's spec through the view, and what it sets on the view's metadata
// reaches the typed object on sync, while an unstructured object is its own
// view.
func TestTypedObjectsAreReadAndTheirMetadataWrittenBack(t *testing.T) {
	gvk := v1alpha1.SchemeGroupVersion.WithKind("Project")
	p := &v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"a": "b"}},
		Spec: v1alpha1.ProjectSpec{OwnerRef: v1alpha1.ParentReference{Kind: v1alpha1.ParentKindFolder, Name: "team"}}}
	u, sync, ok := Of(p, gvk)
	if !ok || u.GetKind() != "Project" || u.GetAPIVersion() != "resourcemanager.miloapis.com/v1alpha1" {
		t.Fatalf("view: %v %v", ok, u)
	}
	if name, _, _ := unstructured.NestedString(u.Object, "spec", "ownerRef", "name"); name != "team" {
		t.Fatalf("spec through the view: %q", name)
	}
	u.SetLabels(map[string]string{"a": "b", "org": "acme"})
	u.SetFinalizers([]string{"x/y"})
	u.SetAnnotations(map[string]string{"k": "v"})
	if p.Labels["org"] != "" {
		t.Fatal("the typed object changed before sync")
	}
	sync()
	if p.Labels["org"] != "acme" || len(p.Finalizers) != 1 || p.Annotations["k"] != "v" {
		t.Fatalf("after sync: %+v", p.ObjectMeta)
	}

	same := &unstructured.Unstructured{Object: map[string]any{"kind": "Project"}}
	if v, _, ok := Of(same, gvk); !ok || v != same {
		t.Fatal("an unstructured object is not its own view")
	}
	if _, sync, ok := Of(nil, gvk); ok {
		t.Fatal("nil has a view")
	} else {
		sync()
	}
}
