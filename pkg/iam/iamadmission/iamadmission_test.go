package iamadmission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"

	"go.miloapis.com/milo/pkg/iam/evaluator"
)

// tree is the hierarchy: the organization of "folders/{name}" and "projects/{name}".
type tree map[string]string

func (t tree) OrganizationOf(_ context.Context, gr schema.GroupResource, name string) (string, bool, error) {
	org, ok := t[gr.Resource+"/"+name]
	return org, ok, nil
}
func (t tree) OrganizationGoing(context.Context, string) (bool, error) { return false, nil }
func (t tree) MembershipsOf(string) []*unstructured.Unstructured       { return nil }

func newPlugin(e *evaluator.Evaluator) *plugin {
	return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), iam: e,
		hierarchy: tree{"folders/team": "acme", "projects/web": "acme", "projects/elsewhere": "other"}}
}

var (
	rolesResource    = schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "roles"}
	bindingsResource = schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "policybindings"}
)

// ref is "name" or "namespace/name".
func ref(s string) map[string]any {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return map[string]any{"namespace": ns, "name": name}
	}
	return map[string]any{"name": s}
}

func roleObject(namespace, name string, inherits ...string) *unstructured.Unstructured {
	spec := map[string]any{"includedPermissions": []any{"core/configmaps.get"}}
	if len(inherits) > 0 {
		var inherited []any
		for _, in := range inherits {
			inherited = append(inherited, ref(in))
		}
		spec["inheritedRoles"] = inherited
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "Role",
		"metadata": map[string]any{"namespace": namespace, "name": name}, "spec": spec}}
}

// validate admits op on obj (its old version too, for an update or delete).
func validate(p *plugin, resource schema.GroupVersionResource, op admission.Operation, subresource string, obj *unstructured.Unstructured) error {
	var newObj, oldObj runtime.Object = obj, nil
	switch op {
	case admission.Update:
		oldObj = obj.DeepCopy()
	case admission.Delete:
		newObj, oldObj = nil, obj
	}
	kind := resource.GroupVersion().WithKind(obj.GetKind())
	return p.Validate(context.Background(), admission.NewAttributesRecord(newObj, oldObj, kind, obj.GetNamespace(), obj.GetName(),
		resource, subresource, op, nil, false, nil), nil)
}

// fields returns the fields a 422 names; nil for no error; it fails on any other error.
func fields(t *testing.T, name string, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	if !apierrors.IsInvalid(err) {
		t.Errorf("%s: got %v, want 422 Invalid", name, err)
		return []string{"?"}
	}
	var out []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		out = append(out, c.Field)
	}
	return out
}

// roles stores what admission reads: in acme, a chain c0 ← c1 ← … ← c7 (c1
// inherits c0, c0 the platform's viewer: c7 is 8 levels deep); in organization
// other, a role secret; the platform's owner → editor → viewer.
func roles() *evaluator.Evaluator {
	e := evaluator.New()
	e.Registered().Set("configmaps", evaluator.Registration{Group: "core", Plural: "configmaps", Verbs: []string{"get", "list"}})
	e.Registered().MarkSynced()
	platform := func(name string) evaluator.RoleKey {
		return evaluator.RoleKey{Namespace: PlatformNamespace, Name: name}
	}
	acme := func(name string) evaluator.RoleKey {
		return evaluator.RoleKey{Namespace: "organization-acme", Name: name}
	}
	e.SetRole(platform("viewer"), []string{"core/configmaps.get"}, nil)
	e.SetRole(platform("editor"), []string{"core/configmaps.create"}, []evaluator.RoleKey{platform("viewer")})
	e.SetRole(platform("owner"), []string{"*/*.*"}, []evaluator.RoleKey{platform("editor")})
	e.SetRole(acme("c0"), nil, []evaluator.RoleKey{platform("viewer")})
	for i := 1; i <= 7; i++ {
		e.SetRole(acme(fmt.Sprintf("c%d", i)), nil, []evaluator.RoleKey{acme(fmt.Sprintf("c%d", i-1))})
	}
	e.SetRole(acme("a"), nil, []evaluator.RoleKey{acme("b")})
	e.SetRole(acme("b"), nil, nil)
	e.SetRole(evaluator.RoleKey{Namespace: "organization-other", Name: "secret"}, []string{"core/secrets.get"}, nil)
	return e
}

func TestRoles(t *testing.T) {
	p := newPlugin(roles())
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("r%d", i)
		}
		return out
	}
	const acme = "organization-acme"
	for _, c := range []struct {
		name    string
		op      admission.Operation
		role    *unstructured.Unstructured
		fields  []string // the 422's fields; nil: admitted
		message string   // in the 422's message
	}{
		{name: "own organization's and the platform's", role: roleObject(acme, "new", "c1", "organization-acme/c2", "milo-system/editor")},
		{name: "inheriting nothing", role: roleObject(acme, "new")},
		{name: "another organization's role", role: roleObject(acme, "new", "c1", "organization-other/secret"),
			fields: []string{"spec.inheritedRoles[1]"}, message: "a Role in organization-acme can inherit only Roles of organization-acme and of milo-system"},
		{name: "another organization's role that does not exist: the same answer", role: roleObject(acme, "new", "c1", "organization-other/nothing"),
			fields: []string{"spec.inheritedRoles[1]"}, message: "a Role in organization-acme can inherit only Roles of organization-acme and of milo-system"},
		{name: "another namespace's role", role: roleObject(acme, "new", "default/r"), fields: []string{"spec.inheritedRoles[0]"}},
		{name: "updating into another organization", op: admission.Update, role: roleObject(acme, "c3", "organization-other/secret"),
			fields: []string{"spec.inheritedRoles[0]"}},
		{name: "a platform role inheriting an organization's", role: roleObject(PlatformNamespace, "new", "organization-acme/c0"),
			fields: []string{"spec.inheritedRoles[0]"}, message: "a Role in milo-system can inherit only Roles of milo-system"},
		{name: "a platform role inheriting the platform's", role: roleObject(PlatformNamespace, "new", "owner")},
		{name: "as many inherited roles as allowed", role: roleObject(acme, "new", many(evaluator.MaxInheritedRoles)...)},
		{name: "too many inherited roles", role: roleObject(acme, "new", many(evaluator.MaxInheritedRoles+1)...),
			fields: []string{"spec.inheritedRoles"}, message: fmt.Sprintf("must have at most %d items", evaluator.MaxInheritedRoles)},
		{name: "a cycle", op: admission.Update, role: roleObject(acme, "b", "a"), fields: []string{"spec.inheritedRoles"}, message: "cycle"},
		{name: "as deep as allowed", role: roleObject(acme, "new", "c6")},
		{name: "one level too deep", role: roleObject(acme, "new", "c7"), fields: []string{"spec.inheritedRoles"},
			message: `"organization-acme/new → organization-acme/c7 → organization-acme/c6 → organization-acme/c5 → organization-acme/c4 → organization-acme/c3 → organization-acme/c2 → organization-acme/c1 → organization-acme/c0 → milo-system/viewer": inheritance would be 9 levels deep; at most 8 are allowed`},
		{name: "lengthening a chain from the middle", op: admission.Update, role: roleObject(acme, "c0", "milo-system/editor"),
			fields: []string{"spec.inheritedRoles"}, message: "inheritance would be 9 levels deep"},
		{name: "a role below the chain lengthening it", role: roleObject(acme, "c0", "milo-system/owner"), op: admission.Update,
			fields: []string{"spec.inheritedRoles"}},
		{name: "the platform changing its roles, whatever organizations built on them", op: admission.Update,
			role: roleObject(PlatformNamespace, "viewer", "milo-system/base")},
		{name: "deleting", op: admission.Delete, role: roleObject(acme, "c7", "organization-other/secret")},
	} {
		op := c.op
		if op == "" {
			op = admission.Create
		}
		err := validate(p, rolesResource, op, "", c.role)
		if got := fields(t, c.name, err); !slices.Equal(got, c.fields) {
			t.Errorf("%s: fields %v (%v), want %v", c.name, got, err, c.fields)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), c.message) {
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.message)
		}
	}
	// Whether another organization's role exists makes no difference to the answer.
	exists := validate(p, rolesResource, admission.Create, "", roleObject(acme, "new", "organization-other/secret"))
	absent := validate(p, rolesResource, admission.Create, "", roleObject(acme, "new", "organization-other/nothing"))
	if exists == nil || absent == nil || strings.ReplaceAll(exists.Error(), "secret", "nothing") != absent.Error() {
		t.Errorf("the answers tell another organization's roles apart: %v; %v", exists, absent)
	}
	// The status is the Role controller's; nothing of the spec is looked at.
	if err := validate(p, rolesResource, admission.Update, "status", roleObject(acme, "old", "organization-other/secret")); err != nil {
		t.Errorf("a status update: %v", err)
	}
}

func TestPolicyBindings(t *testing.T) {
	p := newPlugin(roles())
	binding := func(namespace, role string, resource map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "PolicyBinding",
			"metadata": map[string]any{"namespace": namespace, "name": "b"},
			"spec": map[string]any{"roleRef": ref(role), "subjects": []any{map[string]any{"kind": "User", "name": "bob"}},
				"resourceSelector": map[string]any{"resourceRef": resource}}}}
	}
	acmeOrg := map[string]any{"apiGroup": evaluator.ResourceManagerGroup, "kind": "Organization", "name": "acme"}
	for _, c := range []struct {
		name    string
		binding *unstructured.Unstructured
		fields  []string
	}{
		{"a platform role", binding("organization-acme", "milo-system/viewer", acmeOrg), nil},
		{"a role of its organization", binding("organization-acme", "organization-acme/c1", acmeOrg), nil},
		{"a role of its namespace, unqualified", binding("organization-acme", "c1", acmeOrg), nil},
		{"another organization's role", binding("organization-acme", "organization-other/secret", acmeOrg), []string{"spec.roleRef.namespace"}},
		{"a platform binding granting an organization's role", binding(PlatformNamespace, "organization-acme/c1", acmeOrg), []string{"spec.roleRef.namespace"}},
		{"another organization", binding("organization-acme", "milo-system/viewer",
			map[string]any{"apiGroup": evaluator.ResourceManagerGroup, "kind": "Organization", "name": "other"}), []string{"spec.resourceSelector.resourceRef.name"}},
		{"another organization's project, with another organization's role", binding("organization-acme", "organization-other/secret",
			map[string]any{"apiGroup": evaluator.ResourceManagerGroup, "kind": "Project", "name": "elsewhere"}),
			[]string{"spec.roleRef.namespace", "spec.resourceSelector.resourceRef.name"}},
		{"an object of its project", binding("organization-acme", "milo-system/viewer",
			map[string]any{"apiGroup": "", "kind": "ConfigMap", "namespace": "default", "name": "settings", "project": "web"}), nil},
	} {
		err := validate(p, bindingsResource, admission.Create, "", c.binding)
		if got := fields(t, c.name, err); !slices.Equal(got, c.fields) {
			t.Errorf("%s: fields %v (%v), want %v", c.name, got, err, c.fields)
		}
	}
}

// A Role grants only what ProtectedResources register, unless annotated for a
// migration; an update keeps what the Role already had.
func TestRolesGrantRegisteredPermissionsOnly(t *testing.T) {
	p := newPlugin(roles())
	with := func(perms []string, annotations map[string]any) *unstructured.Unstructured {
		r := roleObject("organization-acme", "perms")
		var list []any
		for _, perm := range perms {
			list = append(list, perm)
		}
		r.Object["spec"].(map[string]any)["includedPermissions"] = list
		if annotations != nil {
			r.Object["metadata"].(map[string]any)["annotations"] = annotations
		}
		return r
	}
	for _, c := range []struct {
		name   string
		role   *unstructured.Unstructured
		old    *unstructured.Unstructured
		fields []string
	}{
		{name: "registered", role: with([]string{"core/configmaps.get", "core/configmaps/status.list"}, nil)},
		{name: "wildcards", role: with([]string{"core/configmaps.*", "*/*.*", "widgets.example.com/*.get"}, nil)},
		{name: "an unregistered kind", role: with([]string{"widgets.example.com/widgets.get"}, nil), fields: []string{"spec.includedPermissions"}},
		{name: "an unregistered verb", role: with([]string{"core/configmaps.delete"}, nil), fields: []string{"spec.includedPermissions"}},
		{name: "annotated for a migration", role: with([]string{"widgets.example.com/widgets.get"}, map[string]any{AllowUnregisteredAnnotation: "true"})},
		{name: "an update keeping what the Role had", role: with([]string{"widgets.example.com/widgets.get", "core/configmaps.get"}, nil),
			old: with([]string{"widgets.example.com/widgets.get"}, nil)},
		{name: "an update adding an unregistered permission", role: with([]string{"widgets.example.com/widgets.get", "widgets.example.com/widgets.list"}, nil),
			old: with([]string{"widgets.example.com/widgets.get"}, nil), fields: []string{"spec.includedPermissions"}},
	} {
		op, oldObj := admission.Create, runtime.Object(nil)
		if c.old != nil {
			op, oldObj = admission.Update, c.old
		}
		err := p.Validate(context.Background(), admission.NewAttributesRecord(c.role, oldObj, rolesResource.GroupVersion().WithKind("Role"), c.role.GetNamespace(), c.role.GetName(),
			rolesResource, "", op, nil, false, nil), nil)
		if got := fields(t, c.name, err); !slices.Equal(got, c.fields) {
			t.Errorf("%s: fields %v (%v), want %v", c.name, got, err, c.fields)
		}
	}
}
