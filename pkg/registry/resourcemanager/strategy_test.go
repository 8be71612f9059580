package resourcemanager

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
)

func newStrategy(t *testing.T, resource string) typedgroup.Strategy {
	t.Helper()
	s, ok := Group.StrategyOf(resource)
	if !ok {
		t.Fatalf("no kind %s", resource)
	}
	return s
}

func project(name string) *v1alpha1.Project {
	return &v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec: v1alpha1.ProjectSpec{OwnerRef: v1alpha1.ParentReference{Kind: v1alpha1.ParentKindOrganization, Name: "acme"}}}
}

// TestCreateDropsStatusAndStartsTheGeneration: as for a custom resource with a
// status subresource, a create writes no status and starts at generation 1.
func TestCreateDropsStatusAndStartsTheGeneration(t *testing.T) {
	s := newStrategy(t, "projects")
	p := project("web")
	p.Generation = 7
	p.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
	s.PrepareForCreate(context.Background(), p)
	if p.Generation != 1 || len(p.Status.Conditions) != 0 {
		t.Fatalf("after create: generation %d, status %+v", p.Generation, p.Status)
	}
	if errs := s.Validate(context.Background(), p); len(errs) != 0 {
		t.Fatalf("valid project refused: %v", errs)
	}
}

// TestUpdatesCountSpecChangesAndKeepStatus: the main resource keeps the stored
// status and bumps the generation for a spec change only; the status
// subresource writes status and nothing else.
func TestUpdatesCountSpecChangesAndKeepStatus(t *testing.T) {
	ctx := context.Background()
	s := newStrategy(t, "projects")
	old := project("web")
	old.Generation = 3
	old.Status.ObservedGeneration = 3

	labelsOnly := old.DeepCopy()
	labelsOnly.Labels = map[string]string{"team": "a"}
	labelsOnly.Status = v1alpha1.ProjectStatus{}
	s.PrepareForUpdate(ctx, labelsOnly, old)
	if labelsOnly.Generation != 3 || labelsOnly.Status.ObservedGeneration != 3 {
		t.Errorf("label change: generation %d, status %+v", labelsOnly.Generation, labelsOnly.Status)
	}

	moved := old.DeepCopy()
	moved.Spec.OwnerRef = v1alpha1.ParentReference{Kind: v1alpha1.ParentKindFolder, Name: "team"}
	s.PrepareForUpdate(ctx, moved, old)
	if moved.Generation != 4 {
		t.Errorf("spec change: generation %d, want 4", moved.Generation)
	}

	status := old.DeepCopy()
	status.Spec.OwnerRef.Name = "other"
	status.Labels = map[string]string{"sneaked": "in"}
	status.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}
	typedgroup.StatusStrategy{Strategy: s}.PrepareForUpdate(ctx, status, old)
	if status.Spec.OwnerRef.Name != "acme" || status.Labels != nil || len(status.Status.Conditions) != 1 {
		t.Errorf("status update: spec %+v, labels %v, status %+v", status.Spec, status.Labels, status.Status)
	}
	if errs := (typedgroup.StatusStrategy{Strategy: s}).ValidateUpdate(ctx, status, old); len(errs) != 0 {
		t.Errorf("valid status refused: %v", errs)
	}
}

// TestValidationSaysWhatTheDefinitionsSaid: names, enums, required
// references and immutable fields are refused with the messages the kinds'
// definitions gave.
func TestValidationSaysWhatTheDefinitionsSaid(t *testing.T) {
	ctx := context.Background()
	org := newStrategy(t, "organizations")
	for _, c := range []struct {
		obj  runtime.Object
		s    typedgroup.Strategy
		want string
	}{
		{&v1alpha1.Organization{ObjectMeta: metav1.ObjectMeta{Name: "Not.A.Label"}}, org, "organization names are DNS labels"},
		{&v1alpha1.Organization{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 51)}}, org, "organization names are at most 50 characters"},
		{&v1alpha1.Organization{ObjectMeta: metav1.ObjectMeta{Name: "acme"}, Spec: v1alpha1.OrganizationSpec{Type: "Weird"}}, org, `spec.type: Unsupported value: "Weird"`},
		{&v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 64)}}, newStrategy(t, "projects"), "project names are DNS labels"},
		{&v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, newStrategy(t, "projects"), "spec.ownerRef.kind: Required value"},
		{&v1alpha1.Folder{ObjectMeta: metav1.ObjectMeta{Name: "team"}, Spec: v1alpha1.FolderSpec{ParentRef: v1alpha1.ParentReference{Kind: "Project", Name: "x"}}},
			newStrategy(t, "folders"), `spec.parentRef.kind: Unsupported value: "Project"`},
		{&v1alpha1.ProjectSuspension{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: v1alpha1.ProjectSuspensionSpec{ProjectRef: v1alpha1.ProjectReference{Name: "web"}, Reason: "Boredom", ReinstateAuthority: v1alpha1.AuthorityOperator, RequestedBy: "ops"}},
			newStrategy(t, "projectsuspensions"), `spec.reason: Unsupported value: "Boredom"`},
	} {
		c.s.PrepareForCreate(ctx, c.obj)
		errs := c.s.Validate(ctx, c.obj)
		if !strings.Contains(errs.ToAggregate().Error(), c.want) {
			t.Errorf("%T: errors %v, want one saying %q", c.obj, errs, c.want)
		}
	}

	// Defaults fill the type; once set, it cannot change.
	o := &v1alpha1.Organization{ObjectMeta: metav1.ObjectMeta{Name: "acme", ResourceVersion: "1"}}
	org.PrepareForCreate(ctx, o)
	if o.Spec.Type != v1alpha1.OrganizationTypeStandard {
		t.Fatalf("default type %q", o.Spec.Type)
	}
	changed := o.DeepCopy()
	changed.Spec.Type = v1alpha1.OrganizationTypePersonal
	org.PrepareForUpdate(ctx, changed, o)
	if errs := org.ValidateUpdate(ctx, changed, o); !strings.Contains(errs.ToAggregate().Error(), "type is immutable") {
		t.Errorf("type change: %v", errs)
	}

	m := newStrategy(t, "organizationmemberships")
	old := &v1alpha1.OrganizationMembership{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: "organization-acme", ResourceVersion: "1"},
		Spec: v1alpha1.OrganizationMembershipSpec{OrganizationRef: v1alpha1.OrganizationReference{Name: "acme"}, UserRef: v1alpha1.UserReference{Name: "alice"}}}
	moved := old.DeepCopy()
	moved.Spec.UserRef.Name = "mallory"
	if errs := m.ValidateUpdate(ctx, moved, old); !strings.Contains(errs.ToAggregate().Error(), "userRef is immutable") {
		t.Errorf("membership user change: %v", errs)
	}
}

// TestUnchangedSpecIsNotCheckedAgain: an object stored under other rules
// keeps accepting metadata changes (its finalizers removed) and status
// writes, as a custom resource's unchanged fields do (ratcheting).
func TestUnchangedSpecIsNotCheckedAgain(t *testing.T) {
	ctx := context.Background()
	s := newStrategy(t, "folders")
	old := &v1alpha1.Folder{ObjectMeta: metav1.ObjectMeta{Name: "team", ResourceVersion: "1", Finalizers: []string{"x/y"}},
		Spec: v1alpha1.FolderSpec{ParentRef: v1alpha1.ParentReference{Kind: "Legacy", Name: "acme"}}}
	done := old.DeepCopy()
	done.Finalizers = nil
	if errs := s.ValidateUpdate(ctx, done, old); len(errs) != 0 {
		t.Errorf("finalizer removal refused: %v", errs)
	}
	status := old.DeepCopy()
	status.Status.ObservedGeneration = 1
	if errs := (typedgroup.StatusStrategy{Strategy: s}).ValidateUpdate(ctx, status, old); len(errs) != 0 {
		t.Errorf("status write refused: %v", errs)
	}
	moved := old.DeepCopy()
	moved.Spec.ParentRef.Name = "other"
	if errs := s.ValidateUpdate(ctx, moved, old); len(errs) == 0 {
		t.Error("a changed invalid spec accepted")
	}
}

// TestEveryKindHasItsColumns: the printer columns come from the generated
// definitions; a kind without one would not be served.
func TestEveryKindHasItsColumns(t *testing.T) {
	for _, k := range Group.Kinds {
		table, err := Group.PrinterColumns(k)
		if err != nil || table == nil {
			t.Errorf("%s: %v", k.Resource, err)
		}
	}
}

// TestDefaultsAreAppliedOnDecode: as a custom resource's, an Organization's
// type is defaulted when a request or a stored object is decoded, before
// admission sees it, not only when it is written.
func TestDefaultsAreAppliedOnDecode(t *testing.T) {
	obj, err := runtime.Decode(legacyscheme.Codecs.UniversalDecoder(),
		[]byte(`{"apiVersion":"resourcemanager.miloapis.com/v1alpha1","kind":"Organization","metadata":{"name":"acme"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := obj.(*v1alpha1.Organization); !ok || o.Spec.Type != v1alpha1.OrganizationTypeStandard {
		t.Fatalf("decoded %#v", obj)
	}
}

// TestStatusConditionsAreChecked: a status write with an invalid condition
// is refused, for each kind whose status is its conditions.
func TestStatusConditionsAreChecked(t *testing.T) {
	bad := []metav1.Condition{{Type: "Ready", Status: "Maybe", Reason: "R", LastTransitionTime: metav1.Now()}}
	for _, obj := range []runtime.Object{
		&v1alpha1.Organization{Status: v1alpha1.OrganizationStatus{Conditions: bad}},
		&v1alpha1.Folder{Status: v1alpha1.FolderStatus{Conditions: bad}},
		&v1alpha1.Project{Status: v1alpha1.ProjectStatus{Conditions: bad}},
	} {
		if errs := conditionsOnly(obj, nil); len(errs) == 0 {
			t.Errorf("%T: an invalid condition accepted", obj)
		}
	}
}
