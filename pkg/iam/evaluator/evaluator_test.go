package evaluator

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func perm(t *testing.T, s string) Permission {
	t.Helper()
	p, ok := ParsePermission(s)
	if !ok {
		t.Fatalf("bad permission %q", s)
	}
	return p
}

// tree: org acme → folder team → folder sub → project web; project api under acme;
// organization other → project elsewhere.
func newTestEvaluator() *Evaluator {
	e := New()
	e.SetParent(Folder("team"), Organization("acme"))
	e.SetParent(Folder("sub"), Folder("team"))
	e.SetParent(Project("web"), Folder("sub"))
	e.SetParent(Project("api"), Organization("acme"))
	e.SetParent(Project("elsewhere"), Organization("other"))
	e.SetRole(RoleKey{"milo-system", "viewer"}, []string{"core/configmaps.get", "core/configmaps.list", "resourcemanager.miloapis.com/projects.get"}, nil)
	e.SetRole(RoleKey{"milo-system", "editor"}, []string{"core/configmaps.create"}, []RoleKey{{"milo-system", "viewer"}})
	return e
}

func TestGrantsInheritDownTheHierarchyOnly(t *testing.T) {
	e := newTestEvaluator()
	folderTeam := Folder("team")
	e.SetBinding("organization-acme/bob-viewer", Binding{Role: RoleKey{"milo-system", "viewer"},
		Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &folderTeam})
	get := perm(t, "core/configmaps.get")
	for _, c := range []struct {
		user    string
		target  Node
		p       Permission
		allowed bool
	}{
		{"bob", Project("web"), get, true},                                // below the folder, two levels
		{"bob", Folder("sub"), get, true},                                 // the folder below
		{"bob", Project("api"), get, false},                               // a sibling under the organization
		{"bob", Organization("acme"), get, false},                         // above the binding
		{"bob", Project("elsewhere"), get, false},                         // another organization
		{"bob", Project("web"), perm(t, "core/configmaps.create"), false}, // not in the role
		{"carol", Project("web"), get, false},                             // nobody else
	} {
		if got, _ := e.Allowed(Request{User: c.user, Permission: c.p, Target: c.target}); got != c.allowed {
			t.Errorf("%s %s on %v: %v, want %v", c.user, c.p, c.target, got, c.allowed)
		}
	}

	// A project created later, and one moved into the folder, inherit at once.
	e.SetParent(Project("new"), Folder("sub"))
	e.SetParent(Project("api"), Folder("team"))
	for _, p := range []string{"new", "api"} {
		if ok, _ := e.Allowed(Request{User: "bob", Permission: get, Target: Project(p)}); !ok {
			t.Errorf("bob cannot read %s after it came under the folder", p)
		}
	}
	// Revoking removes the access.
	e.DeleteBinding("organization-acme/bob-viewer")
	if ok, _ := e.Allowed(Request{User: "bob", Permission: get, Target: Project("web")}); ok {
		t.Errorf("a deleted binding still grants")
	}
}

func TestRoleInheritanceAndCycles(t *testing.T) {
	e := newTestEvaluator()
	perms, _ := e.EffectivePermissions(RoleKey{"milo-system", "editor"})
	slices.Sort(perms)
	want := []string{"core/configmaps.create", "core/configmaps.get", "core/configmaps.list", "resourcemanager.miloapis.com/projects.get"}
	if !slices.Equal(perms, want) {
		t.Fatalf("editor's effective permissions %v, want %v", perms, want)
	}
	// Changing an inherited role changes the inheriting one.
	e.SetRole(RoleKey{"milo-system", "viewer"}, []string{"core/secrets.get"}, nil)
	perms, _ = e.EffectivePermissions(RoleKey{"milo-system", "editor"})
	if !slices.Contains(perms, "core/secrets.get") || slices.Contains(perms, "core/configmaps.get") {
		t.Fatalf("editor did not follow viewer: %v", perms)
	}
	if c := e.Cycle(RoleKey{"milo-system", "viewer"}, []RoleKey{{"milo-system", "editor"}}); len(c) == 0 {
		t.Fatalf("viewer inheriting editor is a cycle, not found")
	}
	if c := e.Cycle(RoleKey{"milo-system", "auditor"}, []RoleKey{{"milo-system", "editor"}}); len(c) != 0 {
		t.Fatalf("a false cycle: %v", c)
	}
}

func TestSubjectsGroupsServiceAccountsAndKinds(t *testing.T) {
	e := newTestEvaluator()
	web := Project("web")
	acme := Organization("acme")
	e.SetBinding("organization-acme/admins", Binding{Role: RoleKey{"milo-system", "viewer"},
		Subjects: []Subject{{Kind: "Group", Namespace: "organization-acme", Name: "admins"}}, Resource: &acme})
	e.SetBinding("organization-acme/devs", Binding{Role: RoleKey{"milo-system", "editor"},
		Subjects: []Subject{{Kind: "Group", Name: "developers"}}, Resource: &web})
	e.SetBinding("organization-acme/ci", Binding{Role: RoleKey{"milo-system", "editor"},
		Subjects: []Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "ci"}}, Resource: &web})
	e.SetBinding("organization-acme/all-projects", Binding{Role: RoleKey{"milo-system", "viewer"},
		Subjects: []Subject{{Kind: "User", Name: "auditor"}}, Kind: &schema.GroupResource{Group: ResourceManagerGroup, Resource: "projects"}, Scope: "acme"})
	get, create := perm(t, "core/configmaps.get"), perm(t, "core/configmaps.create")
	getProject := perm(t, "resourcemanager.miloapis.com/projects.get")

	if ok, _ := e.Allowed(Request{User: "dave", Permission: get, Target: web}); ok {
		t.Fatal("dave is in no group yet")
	}
	e.SetMembership("organization-acme/dave-admins", "dave", Subject{Namespace: "organization-acme", Name: "admins"})
	if ok, _ := e.Allowed(Request{User: "dave", Permission: get, Target: web}); !ok {
		t.Fatal("a group membership does not grant")
	}
	e.DeleteMembership("organization-acme/dave-admins")
	if ok, _ := e.Allowed(Request{User: "dave", Permission: get, Target: web}); ok {
		t.Fatal("a removed membership still grants")
	}
	if ok, _ := e.Allowed(Request{User: "erin", Groups: []string{"developers"}, Permission: create, Target: web}); !ok {
		t.Fatal("an authenticated group does not grant")
	}
	if ok, _ := e.Allowed(Request{User: "system:serviceaccount:default:ci", Permission: create, Target: web}); !ok {
		t.Fatal("a service account subject does not grant")
	}
	if ok, _ := e.Allowed(Request{User: "system:serviceaccount:default:ci", Permission: create, Target: Project("api")}); ok {
		t.Fatal("a service account's grant leaks to another project")
	}
	// A kind binding covers every object of the kind in its organization only.
	if ok, _ := e.Allowed(Request{User: "auditor", Permission: getProject, Target: Project("api")}); !ok {
		t.Fatal("a kind binding does not grant in its organization")
	}
	if ok, _ := e.Allowed(Request{User: "auditor", Permission: getProject, Target: Project("elsewhere")}); ok {
		t.Fatal("a kind binding grants in another organization")
	}
}

func TestParsePermission(t *testing.T) {
	for s, want := range map[string]Permission{
		"core/configmaps.get":                                 {"", "configmaps", "get"},
		"resourcemanager.miloapis.com/projects.create":        {ResourceManagerGroup, "projects", "create"},
		"resourcemanager.miloapis.com/projects/status.update": {ResourceManagerGroup, "projects/status", "update"},
	} {
		if got, ok := ParsePermission(s); !ok || got != want {
			t.Errorf("%s: %v %v", s, got, ok)
		}
		if got := want.String(); got != s {
			t.Errorf("String() %s, want %s", got, s)
		}
	}
	for _, bad := range []string{"", "configmaps.get", "core/configmaps", "core/.get", "/x.get", "core/x."} {
		if _, ok := ParsePermission(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A binding made in one organization grants nothing in another, whatever it names.
func TestBindingsCountOnlyInTheirOrganization(t *testing.T) {
	e := newTestEvaluator()
	acme := Organization("acme")
	web := Project("web")
	e.SetBinding("organization-other/reach-org", Binding{Role: RoleKey{"milo-system", "viewer"},
		Subjects: []Subject{{Kind: "User", Name: "mallory"}}, Resource: &acme, Scope: "other"})
	e.SetBinding("organization-other/reach-project", Binding{Role: RoleKey{"milo-system", "viewer"},
		Subjects: []Subject{{Kind: "User", Name: "mallory"}}, Resource: &web, Scope: "other"})
	get := perm(t, "core/configmaps.get")
	if ok, b := e.Allowed(Request{User: "mallory", Permission: get, Target: web}); ok {
		t.Fatalf("a binding of organization other grants in acme through %s", b)
	}
	e.SetBinding("organization-acme/in-scope", Binding{Role: RoleKey{"milo-system", "viewer"},
		Subjects: []Subject{{Kind: "User", Name: "mallory"}}, Resource: &web, Scope: "acme"})
	if ok, _ := e.Allowed(Request{User: "mallory", Permission: get, Target: web}); !ok {
		t.Fatal("a binding of acme does not grant in acme")
	}
}

func TestPermissionsListWhatHoldsOnTheTarget(t *testing.T) {
	e := newTestEvaluator()
	team, acme, elsewhere := Folder("team"), Organization("acme"), Project("elsewhere")
	e.SetBinding("organization-acme/bob-viewer", Binding{Role: RoleKey{"milo-system", "viewer"},
		Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &team, Scope: "acme"})
	e.SetBinding("organization-acme/devs-edit", Binding{Role: RoleKey{"milo-system", "editor"},
		Subjects: []Subject{{Kind: "Group", Name: "devs"}}, Resource: &acme, Scope: "acme"})
	// A binding of acme naming another organization's project counts nowhere.
	e.SetBinding("organization-acme/stray", Binding{Role: RoleKey{"milo-system", "editor"},
		Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &elsewhere, Scope: "acme"})
	e.SetBinding("milo-system/secrets", Binding{Role: RoleKey{"milo-system", "editor"},
		Subjects: []Subject{{Kind: "User", Name: "bob"}}, Kind: &schema.GroupResource{Resource: "secrets"}})

	list := func(user string, groups []string, target Node) []string {
		var out []string
		for _, p := range e.Permissions(user, groups, target, nil) {
			out = append(out, p.String())
		}
		if granted := e.GrantsAny(user, groups, target, nil); granted != (len(out) > 0) {
			t.Errorf("%s on %v: GrantsAny %v, permissions %v", user, target, granted, out)
		}
		return out
	}
	// The kind binding narrows the editor role to its kind: nothing of it names secrets.
	if got, want := list("bob", nil, Project("web")), []string{"core/configmaps.get", "core/configmaps.list", "resourcemanager.miloapis.com/projects.get"}; !slices.Equal(got, want) {
		t.Errorf("bob on web: %v, want %v", got, want)
	}
	if got := list("bob", nil, Project("api")); len(got) != 0 {
		t.Errorf("bob on a sibling project: %v", got)
	}
	if got := list("bob", nil, Project("elsewhere")); len(got) != 0 {
		t.Errorf("bob in another organization: %v", got)
	}
	if got, want := list("carol", []string{"devs"}, Project("web")), []string{"core/configmaps.create", "core/configmaps.get", "core/configmaps.list", "resourcemanager.miloapis.com/projects.get"}; !slices.Equal(got, want) {
		t.Errorf("a member of devs on web: %v, want %v", got, want)
	}
	e.SetRole(RoleKey{"milo-system", "editor"}, []string{"core/*.create"}, nil)
	if got, want := list("bob", nil, Project("api")), []string{"core/secrets.create"}; !slices.Equal(got, want) {
		t.Errorf("bob's kind binding with a wildcard role: %v, want %v", got, want)
	}
}

func TestObjectGrantsCoverTheNamedObjectOnly(t *testing.T) {
	e := newTestEvaluator()
	settings := ProjectObject("web", "", "configmaps", "default", "settings")
	e.SetBinding("organization-acme/bob-settings", Binding{Role: RoleKey{"milo-system", "editor"},
		Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &settings, Scope: "acme"})
	// The same object name in another project, and a binding of another organization.
	elsewhere := ProjectObject("elsewhere", "", "configmaps", "default", "settings")
	e.SetBinding("organization-acme/stray", Binding{Role: RoleKey{"milo-system", "editor"},
		Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &elsewhere, Scope: "acme"})
	create := perm(t, "core/configmaps.create")
	for _, c := range []struct {
		name    string
		req     Request
		allowed bool
	}{
		{"the object", Request{User: "bob", Permission: create, Target: Project("web"), Object: settings}, true},
		{"another object", Request{User: "bob", Permission: create, Target: Project("web"), Object: ProjectObject("web", "", "configmaps", "default", "other")}, false},
		{"no object (a list)", Request{User: "bob", Permission: create, Target: Project("web")}, false},
		{"the name in another namespace", Request{User: "bob", Permission: create, Target: Project("web"), Object: ProjectObject("web", "", "configmaps", "prod", "settings")}, false},
		{"another organization's project", Request{User: "bob", Permission: create, Target: Project("elsewhere"), Object: elsewhere}, false},
		{"somebody else", Request{User: "carol", Permission: create, Target: Project("web"), Object: settings}, false},
	} {
		if got, _ := e.Allowed(c.req); got != c.allowed {
			t.Errorf("%s: %v, want %v", c.name, got, c.allowed)
		}
	}
}

func TestSuppliedAncestryServesOneDecisionOnly(t *testing.T) {
	e := newTestEvaluator()
	acme := Organization("acme")
	e.SetBinding("organization-acme/bob-org", Binding{Role: RoleKey{"milo-system", "viewer"},
		Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &acme, Scope: "acme"})
	get := perm(t, "core/configmaps.get")
	fresh := Project("fresh") // created a moment ago: not in the index yet
	if ok, _ := e.Allowed(Request{User: "bob", Permission: get, Target: fresh}); ok {
		t.Fatal("a project the index does not know inherits from nothing")
	}
	// Its ancestry, read by the caller: a new folder under acme.
	edges := []Edge{{Child: fresh, Parent: Folder("new-team")}, {Child: Folder("new-team"), Parent: acme}}
	if ok, _ := e.Allowed(Request{User: "bob", Permission: get, Target: fresh, Ancestry: edges}); !ok {
		t.Fatal("the supplied ancestry does not reach the organization's grant")
	}
	if e.HasParent(fresh) {
		t.Fatal("a decision wrote into the index")
	}
	// The index's own parents come first: web lives in acme, whatever is supplied.
	other := []Edge{{Child: Project("elsewhere"), Parent: acme}}
	if ok, _ := e.Allowed(Request{User: "bob", Permission: get, Target: Project("elsewhere"), Ancestry: other}); ok {
		t.Fatal("a supplied parent overrode the index")
	}
	if got := e.Permissions("bob", nil, fresh, edges); len(got) == 0 {
		t.Fatal("rules of a new project ignore the supplied ancestry")
	}
	if !e.GrantsAny("bob", nil, fresh, edges) || e.GrantsAny("bob", nil, fresh, nil) {
		t.Fatal("GrantsAny does not follow the supplied ancestry, and it alone")
	}
}

// A kind's ProtectedResources decide at which levels of the hierarchy a
// binding grants it: their parentResources, followed up to the hierarchy.
func TestGrantsFollowParentResources(t *testing.T) {
	e := newTestEvaluator()
	e.SetRole(RoleKey{"milo-system", "kinds"}, []string{"example.com/widgets.get", "example.com/gadgets.get",
		"example.com/parts.get", "example.com/orphans.get", "resourcemanager.miloapis.com/projects.get"}, nil)
	org := []KindRef{{ResourceManagerGroup, "Organization"}}
	reg := e.Registered()
	reg.Set("organizations", Registration{Group: ResourceManagerGroup, Plural: "organizations", Kind: "Organization"})
	reg.Set("folders", Registration{Group: ResourceManagerGroup, Plural: "folders", Kind: "Folder",
		Parents: []KindRef{{ResourceManagerGroup, "Organization"}, {ResourceManagerGroup, "Folder"}}})
	reg.Set("projects", Registration{Group: ResourceManagerGroup, Plural: "projects", Kind: "Project",
		Parents: []KindRef{{ResourceManagerGroup, "Organization"}, {ResourceManagerGroup, "Folder"}}})
	reg.Set("widgets", Registration{Group: "example.com", Plural: "widgets", Kind: "Widget", Parents: []KindRef{{ResourceManagerGroup, "Project"}}})
	reg.Set("gadgets", Registration{Group: "example.com", Plural: "gadgets", Kind: "Gadget", Parents: org})
	reg.Set("parts", Registration{Group: "example.com", Plural: "parts", Kind: "Part", Parents: []KindRef{{"example.com", "Widget"}}})
	reg.Set("orphans", Registration{Group: "example.com", Plural: "orphans", Kind: "Orphan", Parents: []KindRef{{"example.com", "Nobody"}}})
	for name, at := range map[string]Node{"on-org": Organization("acme"), "on-folder": Folder("team"), "on-project": Project("web")} {
		n := at
		e.SetBinding("b/"+name, Binding{Role: RoleKey{"milo-system", "kinds"}, Subjects: []Subject{{Kind: "User", Name: name}}, Resource: &n})
	}
	for _, c := range []struct {
		user, perm string
		allowed    bool
	}{
		// Under Project: granted on the project and everything above it.
		{"on-project", "example.com/widgets.get", true},
		{"on-folder", "example.com/widgets.get", true},
		{"on-org", "example.com/widgets.get", true},
		// Under Organization only: a binding on a folder or project does not grant it.
		{"on-project", "example.com/gadgets.get", false},
		{"on-folder", "example.com/gadgets.get", false},
		{"on-org", "example.com/gadgets.get", true},
		// Under Widget, which is under Project: followed through.
		{"on-project", "example.com/parts.get", true},
		// A parent nobody registers: as if registered without parents.
		{"on-project", "example.com/orphans.get", true},
		// A hierarchy kind is granted at its own level too.
		{"on-project", "resourcemanager.miloapis.com/projects.get", true},
	} {
		if got, _ := e.Allowed(Request{User: c.user, Permission: perm(t, c.perm), Target: Project("web")}); got != c.allowed {
			t.Errorf("%s: %s in project web: %v, want %v", c.user, c.perm, got, c.allowed)
		}
	}
	// The hierarchy's own levels are fixed: a Project registration edited
	// to name no parents does not cut folders and organizations off from
	// what projects hold.
	reg.Set("projects", Registration{Group: ResourceManagerGroup, Plural: "projects", Kind: "Project"})
	if ok, _ := e.Allowed(Request{User: "on-org", Permission: perm(t, "example.com/widgets.get"), Target: Project("web")}); !ok {
		t.Error("a binding on the organization lost a kind under Project when Project's registration changed")
	}
	// A kind under a parent that is unrestricted is unrestricted.
	reg.Set("widgets-too", Registration{Group: "example.com", Plural: "widgets", Kind: "Widget"})
	if at := e.grantedAt(perm(t, "example.com/parts.get")); at != AnyLevel {
		t.Errorf("a kind under an unrestricted kind is granted at %b", at)
	}
	reg.Delete("widgets-too")
	// Reading the levels allocates nothing, however long the kind's name.
	long := Request{User: "on-folder", Permission: perm(t, "rbac.authorization.k8s.io/clusterrolebindings.get"), Target: Project("web")}
	if allocs := testing.AllocsPerRun(100, func() { e.Allowed(long) }); allocs != 0 {
		t.Errorf("a decision allocates %.0f times", allocs)
	}
	// A subresource follows its kind.
	if at := e.grantedAt(Permission{Group: "example.com", Resource: "gadgets/status", Verb: "get"}); at != AtOrganization {
		t.Errorf("gadgets/status granted at %b, want the organization only", at)
	}
	// What a binding on the project lists leaves out what it does not grant.
	var listed []string
	for _, p := range e.Permissions("on-project", nil, Project("web"), nil) {
		listed = append(listed, p.String())
	}
	if slices.Contains(listed, "example.com/gadgets.get") || !slices.Contains(listed, "example.com/widgets.get") {
		t.Errorf("on-project's permissions in web: %v", listed)
	}
	// A binding whose only kind is granted higher up grants nothing where it is.
	e.SetRole(RoleKey{"milo-system", "org-kinds"}, []string{"example.com/gadgets.get"}, nil)
	web, acme := Project("web"), Organization("acme")
	e.SetBinding("b/org-kinds-on-project", Binding{Role: RoleKey{"milo-system", "org-kinds"}, Subjects: []Subject{{Kind: "User", Name: "dora"}}, Resource: &web})
	if got := e.Permissions("dora", nil, web, nil); len(got) != 0 || e.GrantsAny("dora", nil, web, nil) {
		t.Errorf("an organization-level kind bound on the project: permissions %v, GrantsAny %v", got, e.GrantsAny("dora", nil, web, nil))
	}
	e.SetBinding("b/org-kinds-on-org", Binding{Role: RoleKey{"milo-system", "org-kinds"}, Subjects: []Subject{{Kind: "User", Name: "dora"}}, Resource: &acme})
	if !e.GrantsAny("dora", nil, web, nil) {
		t.Error("the same role bound on the organization grants nothing in its project")
	}
	// Every request in a project asks it (its user's membership): it builds nothing.
	if allocs := testing.AllocsPerRun(100, func() { e.GrantsAny("dora", []string{"devs"}, web, nil) }); allocs != 0 {
		t.Errorf("GrantsAny allocates %.0f times", allocs)
	}
	// A second registration of the kind without parents, or none at all,
	// grants it at every level again.
	reg.Set("gadgets-too", Registration{Group: "example.com", Plural: "gadgets", Kind: "Gadget"})
	if ok, _ := e.Allowed(Request{User: "on-project", Permission: perm(t, "example.com/gadgets.get"), Target: Project("web")}); !ok {
		t.Error("a kind also registered without parents is not granted on the project")
	}
	reg.Delete("gadgets-too")
	reg.Delete("gadgets")
	if ok, _ := e.Allowed(Request{User: "on-project", Permission: perm(t, "example.com/gadgets.get"), Target: Project("web")}); !ok {
		t.Error("an unregistered kind is not granted on the project")
	}
}
