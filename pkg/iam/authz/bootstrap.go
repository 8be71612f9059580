package authz

import (
	"context"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	iamv1alpha1 "go.miloapis.com/milo/pkg/apis/iam/v1alpha1"
)

// verbs of the bootstrap roles.
var (
	readVerbs  = []string{"get", "list", "watch"}
	writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}
)

func permissions(group string, resources, verbs []string) []string {
	var out []string
	for _, r := range resources {
		for _, v := range verbs {
			out = append(out, group+"/"+r+"."+v)
		}
	}
	return out
}

// BootstrapRoles are the platform roles in milo-system, reconciled at every start:
//
//   - viewer reads the hierarchy (organizations, folders, projects) and a
//     project's contents, except secrets and RBAC;
//   - editor also writes them, reads secrets, and creates folders and projects;
//   - owner may do everything, including IAM (roles, bindings, memberships) and
//     the project's RBAC.
func BootstrapRoles() []iamv1alpha1.Role {
	hierarchy := []string{"organizations", "folders", "projects"}
	contents := []string{"configmaps", "namespaces", "serviceaccounts", "events", "limitranges", "resourcequotas"}
	viewer := append(permissions("resourcemanager.miloapis.com", hierarchy, readVerbs), permissions("core", contents, readVerbs)...)
	viewer = append(viewer, permissions("coordination.k8s.io", []string{"leases"}, readVerbs)...)
	viewer = append(viewer, permissions("events.k8s.io", []string{"events"}, readVerbs)...)
	editor := append(permissions("core", append(contents, "secrets"), writeVerbs), permissions("core", []string{"secrets"}, readVerbs)...)
	editor = append(editor, permissions("resourcemanager.miloapis.com", []string{"folders", "projects"}, writeVerbs)...)
	editor = append(editor, permissions("coordination.k8s.io", []string{"leases"}, writeVerbs)...)
	role := func(name string, perms []string, inherits ...string) iamv1alpha1.Role {
		r := iamv1alpha1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "iam.miloapis.com/v1alpha1", Kind: "Role"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: PlatformNamespace, Labels: map[string]string{"iam.miloapis.com/bootstrap": "true"}},
			Spec:       iamv1alpha1.RoleSpec{IncludedPermissions: perms, LaunchStage: "Stable"},
		}
		for _, in := range inherits {
			r.Spec.InheritedRoles = append(r.Spec.InheritedRoles, iamv1alpha1.RoleReference{Name: in, Namespace: PlatformNamespace})
		}
		return r
	}
	return []iamv1alpha1.Role{
		role("viewer", viewer),
		role("editor", editor, "viewer"),
		role("owner", []string{"*/*.*"}, "editor"),
	}
}

// Bootstrap creates the platform namespace and reconciles the bootstrap roles:
// missing ones are created, changed ones are put back.
func Bootstrap(ctx context.Context, config *rest.Config) error {
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: PlatformNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	roles := dyn.Resource(RolesResource).Namespace(PlatformNamespace)
	for _, want := range BootstrapRoles() {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&want)
		if err != nil {
			return err
		}
		existing, err := roles.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if _, err := roles.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if reflect.DeepEqual(existing.Object["spec"], obj["spec"]) {
			continue
		}
		existing.Object["spec"] = obj["spec"]
		if _, err := roles.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}
