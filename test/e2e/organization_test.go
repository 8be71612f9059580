package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"go.miloapis.com/milo/pkg/tenancy"
)

const orgLabel = "resourcemanager.miloapis.com/organization-name"

var (
	policyBindingsGVR = schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "policybindings"}
	membershipsGVR    = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "organizationmemberships"}
)

func project(name, org string, labels map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name}
	if labels != nil {
		meta["labels"] = labels
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": meta,
		"spec": map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": org}},
	}}
}

func policyBinding(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "PolicyBinding", "metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"roleRef":          map[string]any{"name": "viewer", "namespace": "milo-system"},
			"subjects":         []any{map[string]any{"kind": "User", "name": "alice"}},
			"resourceSelector": map[string]any{"resourceKind": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project"}},
		},
	}}
}

func TestOrganizationContextShowsOnlyItsOwnObjects(t *testing.T) {
	m := shared
	ctx := context.Background()
	n := projectSeq.Add(1)
	acme, globex := fmt.Sprintf("acme-%d", n), fmt.Sprintf("globex-%d", n)
	platform := m.dynamic(t)
	for _, org := range []string{acme, globex} {
		m.mustKubectl(t, fmt.Sprintf("apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Organization\nmetadata: {name: %s}\n", org), "apply", "-f", "-")
		createNamespace(t, m.kube(t), "organization-"+org)
	}
	acmeDyn := dynamicFor(t, m.configAt(t, tenancy.OrganizationPath(acme)))

	// A Project made in acme's context is labelled with acme by the server.
	made, err := acmeDyn.Resource(projectsGVR).Create(ctx, project(fmt.Sprintf("acme-web-%d", n), acme, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if made.GetLabels()[orgLabel] != acme {
		t.Fatalf("project created in acme's context has labels %v", made.GetLabels())
	}
	if _, err := acmeDyn.Resource(projectsGVR).Create(ctx, project(fmt.Sprintf("sneaky-%d", n), acme, map[string]any{orgLabel: globex}), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("creating a project labelled for globex in acme's context: %v", err)
	}
	globexProject := fmt.Sprintf("globex-web-%d", n)
	if _, err := platform.Resource(projectsGVR).Create(ctx, project(globexProject, globex, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	list, err := acmeDyn.Resource(projectsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].GetName() != made.GetName() {
		var got []string
		for _, p := range list.Items {
			got = append(got, p.GetName())
		}
		t.Fatalf("acme lists projects %v, want only %s", got, made.GetName())
	}
	if _, err := acmeDyn.Resource(projectsGVR).Get(ctx, globexProject, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("getting globex's project through acme: %v", err)
	}
	if err := acmeDyn.Resource(projectsGVR).Delete(ctx, globexProject, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("deleting globex's project through acme: %v", err)
	}
	if _, err := platform.Resource(projectsGVR).Get(ctx, globexProject, metav1.GetOptions{}); err != nil {
		t.Fatalf("globex's project after acme's attempt: %v", err)
	}

	// Namespaced objects live in organization-acme; other namespaces do not exist here.
	pbs := acmeDyn.Resource(policyBindingsGVR)
	if _, err := pbs.Namespace("organization-"+acme).Create(ctx, policyBinding("viewers"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := platform.Resource(policyBindingsGVR).Namespace("organization-"+globex).Create(ctx, policyBinding("globex-viewers"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// acme's own: the binding made here and the one of its creator's membership.
	all, err := pbs.List(ctx, metav1.ListOptions{})
	var got []string
	if all != nil {
		for _, pb := range all.Items {
			got = append(got, pb.GetNamespace()+"/"+pb.GetName())
		}
	}
	if err != nil || strings.Join(got, ",") != "organization-"+acme+"/milo-admin.owner,organization-"+acme+"/viewers" {
		t.Fatalf("acme lists policy bindings across namespaces: %v %v", got, err)
	}
	// Memberships, likewise: acme's creator only, not globex's.
	members, err := acmeDyn.Resource(membershipsGVR).List(ctx, metav1.ListOptions{})
	if err != nil || len(members.Items) != 1 || members.Items[0].GetNamespace() != "organization-"+acme {
		t.Fatalf("acme lists memberships across namespaces: %v %v", members, err)
	}
	if _, err := pbs.Namespace("organization-"+globex).List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("listing globex's namespace through acme: %v", err)
	}

	kube := kubeFor(t, m.configAt(t, tenancy.OrganizationPath(acme)))
	if _, err := kube.CoreV1().Namespaces().Get(ctx, "organization-"+acme, metav1.GetOptions{}); err != nil {
		t.Fatalf("acme's own namespace: %v", err)
	}
	if _, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("acme lists the platform's namespaces")
	}
	if _, err := kube.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("acme reaches kube-system: %v", err)
	}
	if _, err := kube.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("acme writes to the platform's default namespace: %v", err)
	}

	// Unknown organizations do not exist.
	nope := kubeFor(t, m.configAt(t, tenancy.OrganizationPath("no-such-org")))
	if _, err := nope.CoreV1().Namespaces().Get(ctx, "organization-no-such-org", metav1.GetOptions{}); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `organizations.resourcemanager.miloapis.com "no-such-org" not found`) {
		t.Fatalf("unknown organization: %v", err)
	}
}
