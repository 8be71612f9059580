package hierarchy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

// TestReadersReadGoTypesAsTheirUnstructuredCopies: every reader gives the
// same answer for an object of the group's Go types, its unstructured copy
// and the last state of a deleted one.
func TestReadersReadGoTypesAsTheirUnstructuredCopies(t *testing.T) {
	ready := func(gen int64, status metav1.ConditionStatus) []metav1.Condition {
		return []metav1.Condition{{Type: "Other", Status: metav1.ConditionFalse}, {Type: "Ready", Status: status, ObservedGeneration: gen, Message: "up"}}
	}
	for _, tc := range []struct {
		name                    string
		obj                     any
		kind, parentKind, pName string
		ready, initialized      bool
	}{
		{"project ready", &v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2},
			Spec:   v1alpha1.ProjectSpec{OwnerRef: v1alpha1.ParentReference{Kind: "Folder", Name: "f"}},
			Status: v1alpha1.ProjectStatus{Conditions: ready(2, metav1.ConditionTrue)}}, "Project", "Folder", "f", true, true},
		{"project moved, not confirmed", &v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 3},
			Spec:   v1alpha1.ProjectSpec{OwnerRef: v1alpha1.ParentReference{Kind: "Organization", Name: "o"}},
			Status: v1alpha1.ProjectStatus{Conditions: ready(2, metav1.ConditionTrue)}}, "Project", "Organization", "o", false, true},
		{"folder without generation", &v1alpha1.Folder{ObjectMeta: metav1.ObjectMeta{Name: "f", Generation: 1},
			Spec:   v1alpha1.FolderSpec{ParentRef: v1alpha1.ParentReference{Kind: "Organization", Name: "o"}},
			Status: v1alpha1.FolderStatus{Conditions: ready(0, metav1.ConditionTrue)}}, "Folder", "Organization", "o", true, true},
		{"organization not ready", &v1alpha1.Organization{ObjectMeta: metav1.ObjectMeta{Name: "o"},
			Status: v1alpha1.OrganizationStatus{Conditions: ready(0, metav1.ConditionFalse)}}, "Organization", "", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := AsUnstructured(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if u.GetKind() != tc.kind || u.GetAPIVersion() != v1alpha1.SchemeGroupVersion.String() {
				t.Fatalf("AsUnstructured: %s %s", u.GetAPIVersion(), u.GetKind())
			}
			for _, obj := range []any{tc.obj, u, cache.DeletedFinalStateUnknown{Key: "k", Obj: tc.obj}} {
				if Object(obj) == nil {
					t.Fatalf("Object(%T) = nil", obj)
				}
				if _, isDeleted := obj.(cache.DeletedFinalStateUnknown); isDeleted {
					continue
				}
				if k := KindOf(obj); k != tc.kind {
					t.Errorf("KindOf(%T) = %s", obj, k)
				}
				if k, n := ParentOf(obj); k != tc.parentKind || n != tc.pName {
					t.Errorf("ParentOf(%T) = %s %s", obj, k, n)
				}
				if IsReady(obj) != tc.ready || initialized(obj) != tc.initialized {
					t.Errorf("%T: ready %v initialized %v", obj, IsReady(obj), initialized(obj))
				}
				if ReadyMessage(obj) != "up" {
					t.Errorf("ReadyMessage(%T) = %q", obj, ReadyMessage(obj))
				}
			}
		})
	}
	if Object((*v1alpha1.Project)(nil)) != nil || Object("x") != nil || Object(&unstructured.Unstructured{}) == nil {
		t.Error("Object misreads a nil project, a string or an empty unstructured object")
	}
}
