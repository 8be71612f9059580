package hierarchy

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/tenancy"
)

// getterFunc is a storage's Get.
type getterFunc func(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error)

func (f getterFunc) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	return f(ctx, name, opts)
}

// TestUncachedObjectsAreReadFromStorage: what the informers do not hold yet
// (a project created a moment ago) is read from the storage handed to the
// Tree, in-process, never over the loopback (which this Tree cannot reach),
// in a context that carries nothing of the asking request's (its tenant's
// namespace, its user) and ends with it; a missing object is missing.
func TestUncachedObjectsAreReadFromStorage(t *testing.T) {
	tree := &Tree{}
	// A loopback nobody answers: a read over it fails.
	if err := tree.Init(&rest.Config{Host: "https://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	stored := &v1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "5f0c", Annotations: map[string]string{tenancy.StorageIDAnnotation: "p.5f0c"}},
		Spec:       v1alpha1.ProjectSpec{OwnerRef: v1alpha1.ParentReference{Kind: "Organization", Name: "acme"}},
		Status:     v1alpha1.ProjectStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}},
	}
	reads := 0
	tree.UseStorage("projects", getterFunc(func(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
		reads++
		if ns, ok := request.NamespaceFrom(ctx); ok {
			t.Errorf("the storage read carries the request's namespace %q", ns)
		}
		if u, ok := request.UserFrom(ctx); ok {
			t.Errorf("the storage read carries the request's user %q", u.GetName())
		}
		if name == "slow" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		if name != stored.Name {
			return nil, apierrors.NewNotFound(v1alpha1.Resource("projects"), name)
		}
		return stored.DeepCopy(), nil
	}))
	ctx := request.WithUser(request.WithNamespace(context.Background(), "default"), &user.DefaultInfo{Name: "alice"})

	info, err := tree.Project(ctx, "web")
	if err != nil || info.State != tenancy.ProjectActive || info.ID != "p.5f0c" {
		t.Fatalf("Project(web) = %+v, %v; want active with storage id p.5f0c", info, err)
	}
	kind, parent, found, err := tree.Parent(ctx, false, "web")
	if err != nil || !found || kind != "Organization" || parent != "acme" {
		t.Fatalf("Parent(web) = %s %s %v %v; want Organization acme", kind, parent, found, err)
	}
	if info, err := tree.Project(ctx, "gone"); err != nil || info.State != tenancy.ProjectMissing {
		t.Fatalf("Project(gone) = %+v, %v; want missing", info, err)
	}
	if _, _, found, err := tree.Parent(ctx, false, "gone"); err != nil || found {
		t.Fatalf("Parent(gone): found %v, %v; want not found", found, err)
	}
	if reads != 4 {
		t.Fatalf("%d storage reads, want 4", reads)
	}
	// A ProjectSuspension, never cached, is read the same way.
	tree.UseStorage("projectsuspensions", getterFunc(func(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
		if _, ok := request.UserFrom(ctx); ok {
			t.Error("the storage read carries the request's user")
		}
		return &v1alpha1.ProjectSuspension{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{tenancy.OrganizationLabel: "acme"}}}, nil
	}))
	if org, found, err := tree.OrganizationOf(ctx, tenancy.SuspensionsResource, "hold"); err != nil || !found || org != "acme" {
		t.Fatalf("OrganizationOf(suspension hold) = %q %v %v; want acme", org, found, err)
	}
	// The read ends with the request that asked.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tree.Project(ended, "slow"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read for an ended request: %v, want it cancelled", err)
	}
}
