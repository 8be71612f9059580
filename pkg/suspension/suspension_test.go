package suspension

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/tenancy"
)

func suspensionOf(name, project string) *resourcemanagerv1alpha1.ProjectSuspension {
	return &resourcemanagerv1alpha1.ProjectSuspension{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcemanagerv1alpha1.ProjectSuspensionSpec{ProjectRef: resourcemanagerv1alpha1.ProjectReference{Name: project},
			Reason: resourcemanagerv1alpha1.ReasonBilling, ReinstateAuthority: resourcemanagerv1alpha1.AuthorityOperator, RequestedBy: "billing"}}
}

func TestSuspendedProjectsRefuseWrites(t *testing.T) {
	index := NewIndex()
	p := &plugin{Handler: admission.NewHandler(admission.Create, admission.Update), index: index}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	write := func(tenant tenancy.Tenant, who string) error {
		a := admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "default", "x", configMaps, "",
			admission.Create, nil, false, &user.DefaultInfo{Name: who, Groups: []string{user.SystemPrivilegedGroup}})
		return p.Validate(tenancy.WithTenant(context.Background(), tenant), a, nil)
	}
	if err := write(tenancy.ProjectTenant("web"), "alice"); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("before the index is loaded: %v", err)
	}
	index.MarkSynced()
	index.Set(suspensionOf("web-billing", "web"))
	index.Set(suspensionOf("web-abuse", "web"))
	err := write(tenancy.ProjectTenant("web"), "admin")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `ProjectSuspension "web-abuse"`) {
		t.Fatalf("a suspended project's create, by an administrator: %v", err)
	}
	for _, ok := range []struct {
		tenant tenancy.Tenant
		who    string
	}{{tenancy.ProjectTenant("api"), "alice"}, {tenancy.PlatformTenant, "alice"}, {tenancy.ProjectTenant("web"), user.APIServerUser}} {
		if err := write(ok.tenant, ok.who); err != nil {
			t.Errorf("%s by %s: %v", ok.tenant, ok.who, err)
		}
	}
	index.Delete("web-abuse")
	if err := write(tenancy.ProjectTenant("web"), "alice"); !apierrors.IsForbidden(err) {
		t.Fatalf("with one of two suspensions lifted: %v", err)
	}
	lifted := suspensionOf("web-billing", "web")
	lifted.Status.Phase = resourcemanagerv1alpha1.SuspensionLifted
	index.Set(lifted)
	if err := write(tenancy.ProjectTenant("web"), "alice"); err != nil {
		t.Fatalf("after both are lifted: %v", err)
	}
}

// orgOf places project "web" in organization acme; any other project is missing.
type orgOf struct{}

func (orgOf) OrganizationExists(context.Context, string) (bool, error) { return true, nil }
func (orgOf) OrganizationOf(_ context.Context, _ schema.GroupResource, name string) (string, bool, error) {
	if name == "web" {
		return "acme", true, nil
	}
	return "", false, nil
}

// A suspension is labelled with its project's organization, whatever the
// client sent, and keeps the label; an organization lifts (deletes) only
// one whose reinstateAuthority is Consumer.
func TestSuspensionsBelongToTheirProjectsOrganization(t *testing.T) {
	p := &plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), index: NewIndex(), hierarchy: orgOf{}}
	gvr := resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("projectsuspensions")
	gvk := resourcemanagerv1alpha1.SchemeGroupVersion.WithKind("ProjectSuspension")
	obj := func(project, authority, forged string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "s"},
			"spec": map[string]any{"projectRef": map[string]any{"name": project}, "reinstateAuthority": authority}}}
		if forged != "" {
			u.SetLabels(map[string]string{tenancy.OrganizationLabel: forged})
		}
		return u
	}
	admit := func(o, old *unstructured.Unstructured, op admission.Operation) *unstructured.Unstructured {
		t.Helper()
		var oldObj runtime.Object
		if old != nil {
			oldObj = old
		}
		if err := p.Admit(context.Background(), admission.NewAttributesRecord(o, oldObj, gvk, "", "s", gvr, "", op, nil, false, nil), nil); err != nil {
			t.Fatal(err)
		}
		return o
	}
	if got := admit(obj("web", "Operator", "forged"), nil, admission.Create).GetLabels()[tenancy.OrganizationLabel]; got != "acme" {
		t.Errorf("a suspension of web is labelled %q, want acme", got)
	}
	if got, ok := admit(obj("missing", "Operator", "acme"), nil, admission.Create).GetLabels()[tenancy.OrganizationLabel]; ok {
		t.Errorf("a suspension of a missing project claims organization %q", got)
	}
	old := obj("web", "Operator", "acme")
	if got := admit(obj("web", "Operator", "other"), old, admission.Update).GetLabels()[tenancy.OrganizationLabel]; got != "acme" {
		t.Errorf("an update relabels the suspension %q", got)
	}

	lift := func(authority string) error {
		a := admission.NewAttributesRecord(nil, obj("web", authority, "acme"), gvk, "", "s", gvr, "", admission.Delete, nil, false, &user.DefaultInfo{Name: "alice"})
		return p.Validate(tenancy.WithTenant(context.Background(), tenancy.OrganizationTenant("acme")), a, nil)
	}
	if err := lift("Consumer"); err != nil {
		t.Errorf("an organization lifts a suspension of Consumer authority: %v", err)
	}
	if err := lift("Operator"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only the platform's operators") {
		t.Errorf("an organization lifts a suspension of Operator authority: %v, want 403", err)
	}
}
