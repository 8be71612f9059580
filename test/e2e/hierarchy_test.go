package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var foldersGVR = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "folders"}

func folder(name, parentKind, parent string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Folder", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"parentRef": map[string]any{"kind": parentKind, "name": parent}},
	}}
}

// wantInvalid checks err is a 422 naming field whose message contains text.
func wantInvalid(t *testing.T, err error, field, text string) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 422 || !hasCause(status.Status(), field) || !strings.Contains(err.Error(), text) {
		t.Fatalf("got %v, want 422 on %s saying %q", err, field, text)
	}
}

func TestHierarchyAdmission(t *testing.T) {
	m := shared
	ctx := context.Background()
	n := projectSeq.Add(1)
	orgA, orgB := fmt.Sprintf("h-a-%d", n), fmt.Sprintf("h-b-%d", n)
	for _, o := range []string{orgA, orgB} {
		if err := m.ensureOrganization(o); err != nil {
			t.Fatal(err)
		}
	}
	folders := m.dynamic(t).Resource(foldersGVR)
	projects := m.dynamic(t).Resource(projectsGVR)
	name := func(s string) string { return fmt.Sprintf("%s-%d", s, n) }

	// A chain of folders carries the organization's label all the way down.
	parentKind, parent := "Organization", orgA
	for i := 1; i <= 8; i++ {
		f, err := folders.Create(ctx, folder(name(fmt.Sprintf("f%d", i)), parentKind, parent), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("folder at depth %d: %v", i, err)
		}
		if f.GetLabels()[orgLabel] != orgA {
			t.Fatalf("folder at depth %d labelled %v", i, f.GetLabels())
		}
		parentKind, parent = "Folder", f.GetName()
	}
	_, err := folders.Create(ctx, folder(name("f9"), "Folder", name("f8")), metav1.CreateOptions{})
	wantInvalid(t, err, "spec.parentRef", "at most 8 deep")

	// A project below a folder, with a forged label: the server's label wins.
	p := project(name("deep-project"), "", map[string]any{orgLabel: orgB})
	unstructured.SetNestedField(p.Object, map[string]any{"kind": "Folder", "name": name("f3")}, "spec", "ownerRef") //nolint:errcheck
	made, err := projects.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if made.GetLabels()[orgLabel] != orgA {
		t.Fatalf("project labelled %v, want %s", made.GetLabels(), orgA)
	}

	// Parents must exist.
	_, err = projects.Create(ctx, project(name("orphan"), "no-such-org", nil), metav1.CreateOptions{})
	wantInvalid(t, err, "spec.ownerRef", `Organization "no-such-org" does not exist`)
	_, err = folders.Create(ctx, folder(name("lost"), "Folder", "no-such-folder"), metav1.CreateOptions{})
	wantInvalid(t, err, "spec.parentRef", `Folder "no-such-folder" does not exist`)

	// Moves within the organization are allowed; cycles and other organizations are not.
	if _, err := folders.Patch(ctx, name("f2"), types.MergePatchType, []byte(`{"spec":{"parentRef":{"kind":"Organization","name":"`+orgA+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("moving f2 to the organization: %v", err)
	}
	_, err = folders.Patch(ctx, name("f2"), types.MergePatchType, []byte(`{"spec":{"parentRef":{"kind":"Folder","name":"`+name("f4")+`"}}}`), metav1.PatchOptions{})
	wantInvalid(t, err, "spec.parentRef", "its own ancestor")
	if _, err := folders.Create(ctx, folder(name("b-root"), "Organization", orgB), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = folders.Patch(ctx, name("f5"), types.MergePatchType, []byte(`{"spec":{"parentRef":{"kind":"Folder","name":"`+name("b-root")+`"}}}`), metav1.PatchOptions{})
	wantInvalid(t, err, "spec.parentRef", "to another organization is not allowed")
	_, err = projects.Patch(ctx, made.GetName(), types.MergePatchType, []byte(`{"spec":{"ownerRef":{"kind":"Organization","name":"`+orgB+`"}}}`), metav1.PatchOptions{})
	wantInvalid(t, err, "spec.ownerRef", "to another organization is not allowed")
	_, err = projects.Patch(ctx, made.GetName(), types.MergePatchType, []byte(`{"metadata":{"labels":{"`+orgLabel+`":"`+orgB+`"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := projects.Get(ctx, made.GetName(), metav1.GetOptions{}); got.GetLabels()[orgLabel] != orgA {
		t.Fatalf("the organization label changed to %v", got.GetLabels())
	}
}
