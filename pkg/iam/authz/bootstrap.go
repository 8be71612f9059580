package authz

import (
	"context"
	"reflect"
	"slices"
	"strings"

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
//   - viewer reads the hierarchy (organizations, folders, projects), a
//     project's contents, except secrets and RBAC, the catalog of services
//     and the services a project enabled, and the organization's quotas (grants,
//     claims, buckets);
//   - editor also writes them, reads secrets, and creates folders and projects;
//   - owner may do everything, including IAM (roles, bindings, memberships),
//     the project's RBAC and enabling services in a project.
func BootstrapRoles() []iamv1alpha1.Role {
	hierarchy := []string{"organizations", "folders", "projects"}
	contents := []string{"configmaps", "namespaces", "serviceaccounts", "events", "limitranges", "resourcequotas"}
	// Suspensions of the organization's projects say why writes there fail.
	viewer := append(permissions("resourcemanager.miloapis.com", append(hierarchy, "projectsuspensions"), readVerbs), permissions("core", contents, readVerbs)...)
	viewer = append(viewer, permissions("coordination.k8s.io", []string{"leases"}, readVerbs)...)
	viewer = append(viewer, permissions("events.k8s.io", []string{"events"}, readVerbs)...)
	// The catalog of services, and which ones a project enabled; enabling
	// one (creating a ServiceActivation) is the owner's.
	viewer = append(viewer, permissions("services.miloapis.com", []string{"services", "serviceactivations"}, readVerbs)...)
	// An organization's quotas: what it is allowed and uses (written at the platform only).
	viewer = append(viewer, permissions("quota.miloapis.com", []string{"allowancebuckets", "resourcegrants", "resourceclaims"}, readVerbs)...)
	editor := append(permissions("core", append(contents, "secrets"), writeVerbs), permissions("core", []string{"secrets"}, readVerbs)...)
	editor = append(editor, permissions("resourcemanager.miloapis.com", []string{"folders", "projects"}, writeVerbs)...)
	editor = append(editor, permissions("coordination.k8s.io", []string{"leases"}, writeVerbs)...)
	role := func(name string, perms []string, inherits ...string) iamv1alpha1.Role {
		r := iamv1alpha1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "iam.miloapis.com/v1alpha1", Kind: "Role"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: PlatformNamespace, Labels: map[string]string{bootstrapLabel: "true"}},
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

// ProtectedResourcesResource is the resource of ProtectedResources.
var ProtectedResourcesResource = iamv1alpha1.SchemeGroupVersion.WithResource("protectedresources")

// allVerbs are the verbs a kind served by the apiserver supports.
var allVerbs = append(slices.Clone(readVerbs), writeVerbs...)

// BootstrapProtectedResources registers Milo's kinds and the kinds served in
// every project with IAM. serviceRef.name is the kind's API group ("core" for
// the core group); the object is named {plural}.{group}.
func BootstrapProtectedResources() []iamv1alpha1.ProtectedResource {
	type kind struct {
		group, kind, plural string
		parents             []string // kinds of resourcemanager.miloapis.com
	}
	org, folderOrOrg, project := []string{"Organization"}, []string{"Organization", "Folder"}, []string{"Project"}
	kinds := []kind{
		{"resourcemanager.miloapis.com", "Organization", "organizations", nil},
		{"resourcemanager.miloapis.com", "Folder", "folders", folderOrOrg},
		{"resourcemanager.miloapis.com", "Project", "projects", folderOrOrg},
		{"resourcemanager.miloapis.com", "OrganizationMembership", "organizationmemberships", org},
		{"iam.miloapis.com", "Role", "roles", org},
		{"iam.miloapis.com", "PolicyBinding", "policybindings", org},
		{"iam.miloapis.com", "Group", "groups", org},
		{"iam.miloapis.com", "GroupMembership", "groupmemberships", org},
		{"iam.miloapis.com", "User", "users", nil},
		{"iam.miloapis.com", "ProtectedResource", "protectedresources", nil},
		{"services.miloapis.com", "Service", "services", nil},
		{"services.miloapis.com", "ServiceActivation", "serviceactivations", project},
		{"quota.miloapis.com", "ResourceRegistration", "resourceregistrations", nil},
		{"quota.miloapis.com", "ResourceGrant", "resourcegrants", org},
		{"quota.miloapis.com", "ResourceClaim", "resourceclaims", org},
		{"quota.miloapis.com", "AllowanceBucket", "allowancebuckets", org},
		{"quota.miloapis.com", "ClaimCreationPolicy", "claimcreationpolicies", nil},
		{"quota.miloapis.com", "GrantCreationPolicy", "grantcreationpolicies", nil},
		{"resourcemanager.miloapis.com", "ProjectSuspension", "projectsuspensions", nil},
		{"iam.miloapis.com", "ServiceAccount", "serviceaccounts", project},
		{"core", "Namespace", "namespaces", project},
		{"core", "ConfigMap", "configmaps", project},
		{"core", "Secret", "secrets", project},
		{"core", "ServiceAccount", "serviceaccounts", project},
		{"core", "Event", "events", project},
		{"core", "LimitRange", "limitranges", project},
		{"core", "ResourceQuota", "resourcequotas", project},
		{"events.k8s.io", "Event", "events", project},
		{"coordination.k8s.io", "Lease", "leases", project},
		{"rbac.authorization.k8s.io", "Role", "roles", project},
		{"rbac.authorization.k8s.io", "RoleBinding", "rolebindings", project},
		{"rbac.authorization.k8s.io", "ClusterRole", "clusterroles", project},
		{"rbac.authorization.k8s.io", "ClusterRoleBinding", "clusterrolebindings", project},
	}
	out := make([]iamv1alpha1.ProtectedResource, 0, len(kinds))
	for _, k := range kinds {
		pr := iamv1alpha1.ProtectedResource{
			TypeMeta:   metav1.TypeMeta{APIVersion: "iam.miloapis.com/v1alpha1", Kind: "ProtectedResource"},
			ObjectMeta: metav1.ObjectMeta{Name: k.plural + "." + k.group, Labels: map[string]string{bootstrapLabel: "true"}},
			Spec: iamv1alpha1.ProtectedResourceSpec{ServiceRef: iamv1alpha1.ServiceReference{Name: k.group},
				Kind: k.kind, Plural: k.plural, Singular: strings.ToLower(k.kind), Permissions: allVerbs},
		}
		for _, p := range k.parents {
			pr.Spec.ParentResources = append(pr.Spec.ParentResources, iamv1alpha1.ParentResource{APIGroup: "resourcemanager.miloapis.com", Kind: p})
		}
		out = append(out, pr)
	}
	return out
}

const bootstrapLabel = "iam.miloapis.com/bootstrap"

// Bootstrap creates the platform namespace and reconciles the bootstrap roles
// and protected resources: missing ones are created, changed ones are put back.
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
	for _, r := range BootstrapProtectedResources() {
		if err := reconcile(ctx, dyn.Resource(ProtectedResourcesResource), &r); err != nil {
			return err
		}
	}
	for _, r := range BootstrapRoles() {
		if err := reconcile(ctx, dyn.Resource(RolesResource).Namespace(PlatformNamespace), &r); err != nil {
			return err
		}
	}
	return nil
}

// reconcile creates want, or puts its spec back.
func reconcile(ctx context.Context, client dynamic.ResourceInterface, want metav1.Object) error {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
	if err != nil {
		return err
	}
	existing, err := client.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err := client.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
	if err != nil || reflect.DeepEqual(existing.Object["spec"], obj["spec"]) {
		return err
	}
	existing.Object["spec"] = obj["spec"]
	_, err = client.Update(ctx, existing, metav1.UpdateOptions{})
	return err
}
