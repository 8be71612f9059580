package attack

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Finding 1(a): an organization owner's role (*/*.*) includes impersonate, and
// a project's own cluster-admin binding grants it too. Inside a tenant context
// no role lets anyone impersonate a server identity, a system group, another
// context's service accounts, or the extra fields servers trust.
func TestImpersonationMatrix(t *testing.T) {
	org := organizationOf(t, malloryToken, "imp")
	project := projectIn(t, malloryToken, org, unique("imp"))
	clusterAdminIn(t, malloryToken, project, "mallory")

	refused := []rest.ImpersonationConfig{
		{UserName: "system:apiserver", Groups: []string{"system:masters"}},
		{UserName: "system:apiserver"},
		{UserName: "system:admin"},
		{UserName: "system:kube-controller-manager"},
		{UserName: "system:anonymous"},
		{UserName: "victor", Groups: []string{"system:masters"}},
		{UserName: "victor", Groups: []string{"system:nodes"}},
		{UserName: "victor", Groups: []string{"system:unauthenticated"}},
		{UserName: "victor", Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"x"}}},
		{UserName: "victor", Extra: map[string][]string{tenancy.ExtraParentName: {"other"}}},
	}
	contexts := map[string]string{
		"organization": tenancy.OrganizationPath(org),
		"project":      tenancy.ProjectPath(project),
		"all projects": tenancy.AllProjectsPath,
	}
	for where, path := range contexts {
		cases := refused
		if where != "project" {
			// Service accounts there would be the platform's.
			cases = append(cases, rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:generic-garbage-collector"})
		}
		for _, imp := range cases {
			cfg := at(malloryToken, path)
			cfg.Impersonate = imp
			_, err := kube(t, cfg).CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "impersonat") {
				t.Errorf("%s: impersonating %+v: %v, want 403 naming impersonation", where, imp, err)
			}
		}
	}

	// The platform administrator may not either: in a tenant context, system
	// identities belong to the server.
	cfg := adminAt(tenancy.ProjectPath(project))
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:apiserver", Groups: []string{"system:masters"}}
	if _, err := kube(t, cfg).CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the platform administrator impersonated system:masters in a project: %v", err)
	}

	// The tenant's own identities can be impersonated: a project's own service
	// account, with the groups Kubernetes gives it, and an ordinary user (who
	// gets only what the project grants that user).
	ownSA := at(malloryToken, tenancy.ProjectPath(project))
	ownSA.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:default:ci", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}}
	_, err := kube(t, ownSA).CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "impersonat") {
		t.Errorf("impersonating the project's own service account: %v, want RBAC's 403 for it (not an impersonation refusal)", err)
	}
	asVictor := at(malloryToken, tenancy.ProjectPath(project))
	asVictor.Impersonate = rest.ImpersonationConfig{UserName: "victor"}
	if _, err := kube(t, asVictor).CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "impersonat") {
		t.Errorf("impersonating an ordinary user with no access to the project: %v, want RBAC's 403 for victor", err)
	}
}

// Finding 1(b): the finalizers that make a deletion complete are the server's.
// The owner of an organization can neither strip them through the
// organization's context nor through the platform, so no project is deleted
// with its cleanup or purge skipped.
func TestServerFinalizersCannotBeRemovedByTenants(t *testing.T) {
	org := organizationOf(t, malloryToken, "fin")
	project := projectIn(t, malloryToken, org, unique("fin"))
	for _, patch := range []string{
		`{"metadata":{"finalizers":null}}`,
		`{"metadata":{"finalizers":["resourcemanager.miloapis.com/project-purge"]}}`,
		`{"metadata":{"finalizers":["resourcemanager.miloapis.com/project-cleanup"]}}`,
	} {
		_, err := dyn(t, at(malloryToken, tenancy.OrganizationPath(org))).Resource(projectsGVR).Patch(context.Background(), project, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("patch %s on the project: %v, want 403", patch, err)
		}
	}
	_, err := dyn(t, at(malloryToken, tenancy.OrganizationPath(org))).Resource(organizationsGVR).Patch(context.Background(), org, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err == nil {
		t.Error("the organization's owner removed its cleanup finalizer")
	}
	// Nor can anyone set the project's storage id.
	_, err = dyn(t, at(malloryToken, tenancy.OrganizationPath(org))).Resource(projectsGVR).Patch(context.Background(), project, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+tenancy.StorageIDAnnotation+`":"someone-else"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := dyn(t, adminAt("")).Resource(projectsGVR).Get(context.Background(), project, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := got.GetAnnotations()[tenancy.StorageIDAnnotation]; ok {
		t.Fatalf("a tenant set the project's storage id to %q", id)
	}
}
