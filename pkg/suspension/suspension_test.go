package suspension

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
