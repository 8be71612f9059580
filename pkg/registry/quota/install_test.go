package quota

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
)

func strategy(t *testing.T, resource string) typedgroup.Strategy {
	t.Helper()
	s, ok := Group.StrategyOf(resource)
	if !ok {
		t.Fatalf("no kind %s", resource)
	}
	return s
}

func registration() *v1alpha1.ResourceRegistration {
	return &v1alpha1.ResourceRegistration{ObjectMeta: metav1.ObjectMeta{Name: "widgets", ResourceVersion: "1"},
		Spec: v1alpha1.ResourceRegistrationSpec{ConsumerType: v1alpha1.ConsumerType{APIGroup: "resourcemanager.miloapis.com", Kind: "Project"},
			Type: v1alpha1.TypeEntity, ResourceType: "example.com/widgets", BaseUnit: "widget", DisplayUnit: "widget", UnitConversionFactor: 1,
			ClaimingResources: []v1alpha1.ClaimingResource{{Kind: "ConfigMap"}}}}
}

// TestValidationSaysWhatTheDefinitionsSay: the kinds are checked against
// their generated definitions' schemas and rules, with their messages.
func TestValidationSaysWhatTheDefinitionsSay(t *testing.T) {
	ctx := context.Background()
	s := strategy(t, "resourceregistrations")
	if errs := s.Validate(ctx, registration()); len(errs) != 0 {
		t.Fatalf("a valid registration refused: %v", errs)
	}
	for _, c := range []struct {
		change func(*v1alpha1.ResourceRegistration)
		want   string
	}{
		{func(r *v1alpha1.ResourceRegistration) { r.Spec.Type = "Weird" }, `spec.type: Unsupported value: "Weird": supported values: "Entity", "Allocation", "Feature"`},
		{func(r *v1alpha1.ResourceRegistration) { r.Spec.UnitConversionFactor = 0 }, "spec.unitConversionFactor: Invalid value: 0: spec.unitConversionFactor in body should be greater than or equal to 1"},
		{func(r *v1alpha1.ResourceRegistration) { r.Spec.ClaimingResources = nil }, "spec.claimingResources: Required value"},
		{func(r *v1alpha1.ResourceRegistration) { r.Spec.ConsumerType.APIGroup = "Not_A_Group" }, "spec.consumerType.apiGroup in body should match"},
		{func(r *v1alpha1.ResourceRegistration) { r.Name = "Not_A_Name" }, "metadata.name: Invalid value"},
		// A required string left out encodes as "", which its rules refuse.
		{func(r *v1alpha1.ResourceRegistration) { r.Spec.Type = "" }, `spec.type: Unsupported value: ""`},
		{func(r *v1alpha1.ResourceRegistration) { r.Spec.ResourceType = "" }, "spec.resourceType: Invalid value"},
	} {
		r := registration()
		c.change(r)
		if errs := s.Validate(ctx, r); !strings.Contains(errs.ToAggregate().Error(), c.want) {
			t.Errorf("errors %v, want one saying %q", errs, c.want)
		}
	}

	// The definitions' rules on updates: the resource type is immutable;
	// an unchanged spec is not checked again.
	old := registration()
	changed := old.DeepCopy()
	changed.Spec.ResourceType = "example.com/gadgets"
	s.PrepareForUpdate(ctx, changed, old)
	if errs := s.ValidateUpdate(ctx, changed, old); !strings.Contains(errs.ToAggregate().Error(), "spec.resourceType is immutable") {
		t.Errorf("a changed resource type: %v", errs)
	}
	relabelled := old.DeepCopy()
	relabelled.Labels = map[string]string{"tier": "a"}
	if errs := s.ValidateUpdate(ctx, relabelled, old); len(errs) != 0 {
		t.Errorf("a label change refused: %v", errs)
	}

	// A status write is checked for its status only.
	status := old.DeepCopy()
	status.Status.Conditions = []metav1.Condition{{Type: "Active", Status: "Maybe", Reason: "R", LastTransitionTime: metav1.Now()}}
	if errs := (typedgroup.StatusStrategy{Strategy: s}).ValidateUpdate(ctx, status, old); !strings.Contains(errs.ToAggregate().Error(), "status.conditions[0].status") {
		t.Errorf("an invalid condition written: %v", errs)
	}

	// A rule nested in a policy's template.
	policy := &v1alpha1.ClaimCreationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.ClaimCreationPolicySpec{
		Trigger: v1alpha1.ClaimTriggerSpec{Resource: v1alpha1.ClaimTriggerResource{APIVersion: "v1", Kind: "ConfigMap"}},
		Target: v1alpha1.ClaimTargetSpec{ResourceClaimTemplate: v1alpha1.ResourceClaimTemplate{Spec: v1alpha1.ResourceClaimSpec{
			ConsumerRef: v1alpha1.ConsumerRef{Kind: "Project", Name: "web"},
			Requests:    []v1alpha1.ResourceRequest{{ResourceType: "example.com/widgets", Amount: 1}},
			ResourceRef: &v1alpha1.UnversionedObjectReference{Kind: "ConfigMap", Name: "x"}}}}}}
	if errs := strategy(t, "claimcreationpolicies").Validate(ctx, policy); !strings.Contains(errs.ToAggregate().Error(), "resourceRef field is automatically populated and cannot be set in template") {
		t.Errorf("a template naming its object: %v", errs)
	}
}

// TestAClaimWritesItsStatusWithIt: a claim has no status subresource; its
// create keeps the status the ledger reserved.
func TestAClaimWritesItsStatusWithIt(t *testing.T) {
	s := strategy(t, "resourceclaims")
	c := &v1alpha1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "organization-acme"},
		Status: v1alpha1.ResourceClaimStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionGranted, Status: metav1.ConditionTrue}}}}
	s.PrepareForCreate(context.Background(), c)
	if len(c.Status.Conditions) != 1 || c.Generation != 1 {
		t.Fatalf("claim after create: %+v", c)
	}
	if s.GetResetFields() != nil {
		t.Fatal("a claim's main resource resets fields")
	}
}

// TestSelectableFieldsAreTheDefinitions: each kind has its definition's
// columns, selects by the fields its definition lists, and refuses a
// selector on any other.
func TestSelectableFieldsAreTheDefinitions(t *testing.T) {
	for _, k := range Group.Kinds {
		table, err := Group.PrinterColumns(k)
		if err != nil || table == nil {
			t.Errorf("%s: columns %v", k.Resource, err)
		}
	}
	claim := &v1alpha1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "organization-acme", Labels: map[string]string{"a": "b"}},
		Spec: v1alpha1.ResourceClaimSpec{ConsumerRef: v1alpha1.ConsumerRef{Kind: "Project", Name: "web"},
			ResourceRef: &v1alpha1.UnversionedObjectReference{Kind: "Namespace", Name: "team"}}}
	k, _ := Group.Kind("resourceclaims")
	set := fields.Set{}
	k.SetFields(claim, set)
	if set["spec.consumerRef.name"] != "web" || set["spec.resourceRef.name"] != "team" || len(set) != 6 {
		t.Fatalf("claim fields %v", set)
	}
	gvk := Group.Version.WithKind("ResourceClaim")
	if _, _, err := legacyscheme.Scheme.ConvertFieldLabel(gvk, "spec.resourceRef.kind", "Namespace"); err != nil {
		t.Errorf("a selectable field refused: %v", err)
	}
	if _, _, err := legacyscheme.Scheme.ConvertFieldLabel(gvk, "spec.requests", "1"); err == nil {
		t.Error("a field no definition lists accepted")
	}
}

// TestPoliciesAreEnabledByDefault: the definitions' one default, applied as
// a request or a stored object is decoded.
func TestPoliciesAreEnabledByDefault(t *testing.T) {
	for _, kind := range []string{"ClaimCreationPolicy", "GrantCreationPolicy"} {
		obj, err := runtime.Decode(legacyscheme.Codecs.UniversalDecoder(v1alpha1.SchemeGroupVersion),
			[]byte(`{"apiVersion":"quota.miloapis.com/v1alpha1","kind":"`+kind+`","metadata":{"name":"p"}}`))
		if err != nil {
			t.Fatal(err)
		}
		var disabled *bool
		switch p := obj.(type) {
		case *v1alpha1.ClaimCreationPolicy:
			disabled = p.Spec.Disabled
		case *v1alpha1.GrantCreationPolicy:
			disabled = p.Spec.Disabled
		}
		if disabled == nil || *disabled {
			t.Errorf("%s decoded with disabled %v, want false", kind, disabled)
		}
	}
}

// TestZonelessTimesAreReadAsUTC: an object stored while the kind was a
// custom resource, with a date-time its schema admitted and metav1.Time
// refuses, is read (as UTC) instead of failing its resource's every list.
func TestZonelessTimesAreReadAsUTC(t *testing.T) {
	stored := []byte(`{"apiVersion":"quota.miloapis.com/v1alpha1","kind":"ResourceGrant","metadata":{"name":"g","namespace":"organization-acme"},` +
		`"spec":{"consumerRef":{"kind":"Project","name":"web"},"allowances":[{"resourceType":"core/namespaces","buckets":[{"amount":1125899906842624}]}]},` +
		`"status":{"conditions":[{"type":"Active","status":"True","reason":"R","message":"","lastTransitionTime":"2024-05-01T10:00:00"}]}}`)
	plain := legacyscheme.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)
	if _, err := runtime.Decode(plain, stored); err == nil {
		t.Fatal("the zoneless time decoded as it is: the test shows nothing")
	}
	obj, err := runtime.Decode(typedgroup.StoredTimes(plain), stored)
	if err != nil {
		t.Fatal(err)
	}
	g := obj.(*v1alpha1.ResourceGrant)
	if at := g.Status.Conditions[0].LastTransitionTime.UTC(); at.Hour() != 10 || at.Day() != 1 {
		t.Errorf("read as %v", at)
	}
	if g.Spec.Allowances[0].Buckets[0].Amount != 1<<50 {
		t.Errorf("an amount read as %d", g.Spec.Allowances[0].Buckets[0].Amount)
	}
}
