package projectcrds

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"go.miloapis.com/milo/pkg/tenancy"
)

func admit(t *testing.T, rules Rules, tenant tenancy.Tenant, crd *apiextensions.CustomResourceDefinition, subresource string) error {
	t.Helper()
	p := newPlugin(rules, nil)
	a := admission.NewAttributesRecord(crd, nil, schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
		"", crd.Name, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		subresource, admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "tenant", Groups: []string{"system:authenticated"}})
	return p.Validate(tenancy.WithTenant(context.Background(), tenant), a, nil)
}

func crdOf(group string, conversion *apiextensions.CustomResourceConversion) *apiextensions.CustomResourceDefinition {
	return &apiextensions.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensions.CustomResourceDefinitionSpec{Group: group, Conversion: conversion}}
}

func webhookTo(url string) *apiextensions.CustomResourceConversion {
	return &apiextensions.CustomResourceConversion{Strategy: apiextensions.WebhookConverter, WebhookClientConfig: &apiextensions.WebhookClientConfig{URL: &url}}
}

func TestAdmission(t *testing.T) {
	project := tenancy.Tenant{Kind: tenancy.Project, Name: "p", ID: "p.1"}
	on := Rules{Enabled: true, ConversionWebhookURLPrefixes: []string{"https://convert.example.net/"}}
	for name, c := range map[string]struct {
		rules       Rules
		tenant      tenancy.Tenant
		crd         *apiextensions.CustomResourceDefinition
		subresource string
		code        int32 // 0: admitted
		message     string
	}{
		"a project CRD":                              {rules: on, tenant: project, crd: crdOf("example.com", nil)},
		"the platform's CRD in a reserved group":     {rules: on, tenant: tenancy.Tenant{}, crd: crdOf("x.miloapis.com", webhookTo("https://anywhere/"))},
		"a project CRD on a server that serves none": {rules: Rules{}, tenant: project, crd: crdOf("example.com", nil), code: 403, message: "--project-crds"},
		"a k8s.io group (upstream's approval rule)":  {rules: on, tenant: project, crd: crdOf("gateway.networking.k8s.io", nil)},
		"too many versions":                          {rules: on, tenant: project, crd: withVersions(crdOf("example.com", nil), MaxVersions+1), code: 422, message: "spec.versions"},
		"a Milo group":                               {rules: on, tenant: project, crd: crdOf("iam.miloapis.com", nil), code: 422, message: "reserved"},
		"miloapis.com itself":                        {rules: on, tenant: project, crd: crdOf("miloapis.com", nil), code: 422, message: "reserved"},
		"a group that merely ends like one":          {rules: on, tenant: project, crd: crdOf("notmiloapis.com", nil)},
		"conversion None":                            {rules: on, tenant: project, crd: crdOf("example.com", &apiextensions.CustomResourceConversion{Strategy: apiextensions.NoneConverter})},
		"an allowed conversion webhook":              {rules: on, tenant: project, crd: crdOf("example.com", webhookTo("https://convert.example.net/widgets"))},
		"a conversion webhook elsewhere":             {rules: on, tenant: project, crd: crdOf("example.com", webhookTo("https://convert.example.net.attacker.org/")), code: 422, message: "https://convert.example.net/"},
		"a conversion webhook, none allowed":         {rules: Rules{Enabled: true}, tenant: project, crd: crdOf("example.com", webhookTo("https://convert.example.net/")), code: 422, message: "allows none"},
		"a tenant's write of a CRD's status":         {rules: on, tenant: project, crd: crdOf("example.com", nil), subresource: "status", code: 403, message: "server's to write"},
		"a conversion webhook climbing out":          {rules: on, tenant: project, crd: crdOf("example.com", webhookTo("https://convert.example.net/a/../../admin")), code: 422, message: "conversion webhook"},
		"a conversion webhook climbing out, escaped": {rules: on, tenant: project, crd: crdOf("example.com", webhookTo("https://convert.example.net/%2e%2e/admin")), code: 422, message: "conversion webhook"},
		"a conversion webhook with user info":        {rules: on, tenant: project, crd: crdOf("example.com", webhookTo("https://x@convert.example.net/")), code: 422, message: "conversion webhook"},
		"a webhook strategy without a client config": {rules: on, tenant: project, crd: crdOf("example.com", &apiextensions.CustomResourceConversion{Strategy: apiextensions.WebhookConverter}), code: 422, message: "conversion webhook"},
		"a conversion webhook through a Service": {rules: on, tenant: project, crd: crdOf("example.com", &apiextensions.CustomResourceConversion{Strategy: apiextensions.WebhookConverter,
			WebhookClientConfig: &apiextensions.WebhookClientConfig{Service: &apiextensions.ServiceReference{Namespace: "kube-system", Name: "x"}}}), code: 422, message: "Service"},
	} {
		t.Run(name, func(t *testing.T) {
			err := admit(t, c.rules, c.tenant, c.crd, c.subresource)
			if c.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var status apierrors.APIStatus
			if err == nil {
				t.Fatalf("admitted, want %d", c.code)
			}
			if s, ok := err.(apierrors.APIStatus); ok {
				status = s
			}
			if status == nil || status.Status().Code != c.code || !strings.Contains(err.Error(), c.message) {
				t.Fatalf("got %v, want %d mentioning %q", err, c.code, c.message)
			}
		})
	}
}

func withVersions(crd *apiextensions.CustomResourceDefinition, n int) *apiextensions.CustomResourceDefinition {
	for i := range n {
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensions.CustomResourceDefinitionVersion{Name: fmt.Sprintf("v%d", i+1)})
	}
	return crd
}

// TestGroupsServedFromTypedStorageHaveNoCRDs: at the platform, a CRD of the
// hierarchy's group is refused (it would name the typed storage's keys), and
// one that exists anyway cannot be deleted through the API (its cleanup would
// delete the hierarchy); a group that merely ends like it is not concerned.
func TestGroupsServedFromTypedStorageHaveNoCRDs(t *testing.T) {
	platform := tenancy.Tenant{}
	on := Rules{Enabled: true}
	if err := admit(t, on, platform, crdOf("resourcemanager.miloapis.com", nil), ""); !apierrors.IsInvalid(err) {
		t.Errorf("creating a CRD of the hierarchy's group: %v, want 422", err)
	}
	del := func(tenant tenancy.Tenant, name string) error {
		p := newPlugin(on, nil)
		var old runtime.Object
		if name == "" { // a deletecollection: each CRD it deletes is the old object
			old = crdOf("resourcemanager.miloapis.com", nil)
		}
		a := admission.NewAttributesRecord(nil, old, schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
			"", name, schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
			"", admission.Delete, &metav1.DeleteOptions{}, false, &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}})
		return p.Validate(tenancy.WithTenant(context.Background(), tenant), a, nil)
	}
	if err := del(platform, "projects.resourcemanager.miloapis.com"); !apierrors.IsForbidden(err) {
		t.Errorf("deleting the CRD of projects: %v, want 403", err)
	}
	if err := del(platform, "widgets.foo.resourcemanager.miloapis.com"); err != nil {
		t.Errorf("deleting a CRD of another group: %v", err)
	}
	if err := del(platform, ""); !apierrors.IsForbidden(err) {
		t.Errorf("deleting the CRDs of the group in a collection: %v, want 403", err)
	}
	// A project's own CRDs of any name are the project's to delete.
	if err := del(tenancy.Tenant{Kind: tenancy.Project, Name: "p", ID: "p.1"}, "projects.resourcemanager.miloapis.com"); err != nil {
		t.Errorf("deleting a project's CRD: %v", err)
	}
}
