package evaluator

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func acmeRole(name string) RoleKey  { return RoleKey{"organization-acme", name} }
func otherRole(name string) RoleKey { return RoleKey{"organization-other", name} }
func platformRole(name string) RoleKey {
	return RoleKey{PlatformNamespace, name}
}

func effective(t *testing.T, e *Evaluator, k RoleKey) []string {
	t.Helper()
	perms, _ := e.EffectivePermissions(k)
	slices.Sort(perms)
	return perms
}

// published returns the set a role's cell holds: the same pointer as long as
// the role has not been flattened again.
func published(e *Evaluator, k RoleKey) *permSet {
	e.cellsMu.Lock()
	defer e.cellsMu.Unlock()
	if c := e.cells[k]; c != nil {
		return c.perms.Load()
	}
	return nil
}

func TestRoleChangesFlattenOnlyTheRolesInheritingThem(t *testing.T) {
	e := New()
	e.SetRole(acmeRole("base"), []string{"core/configmaps.get"}, nil)
	e.SetRole(acmeRole("mid"), []string{"core/secrets.get"}, []RoleKey{acmeRole("base")})
	e.SetRole(acmeRole("top"), nil, []RoleKey{acmeRole("mid")})
	e.SetRole(acmeRole("unrelated"), []string{"core/pods.get"}, nil)
	e.SetRole(otherRole("elsewhere"), []string{"core/pods.get"}, []RoleKey{platformRole("viewer")})
	keys := []RoleKey{acmeRole("base"), acmeRole("mid"), acmeRole("top"), acmeRole("unrelated"), otherRole("elsewhere")}
	snapshot := func() map[RoleKey]*permSet {
		out := map[RoleKey]*permSet{}
		for _, k := range keys {
			out[k] = published(e, k)
		}
		return out
	}

	for _, c := range []struct {
		name      string
		change    func()
		refreshed []RoleKey // roles flattened again; the others keep their sets
	}{
		{"an unchanged role (a resync)", func() { e.SetRole(acmeRole("base"), []string{"core/configmaps.get"}, nil) }, nil},
		{"an unchanged inheriting role", func() { e.SetRole(acmeRole("top"), nil, []RoleKey{acmeRole("mid")}) }, nil},
		{"the base", func() { e.SetRole(acmeRole("base"), []string{"core/configmaps.list"}, nil) },
			[]RoleKey{acmeRole("base"), acmeRole("mid"), acmeRole("top")}},
		{"the top", func() { e.SetRole(acmeRole("top"), []string{"core/events.get"}, []RoleKey{acmeRole("mid")}) },
			[]RoleKey{acmeRole("top")}},
		{"a platform role nobody inherits yet", func() { e.SetRole(platformRole("viewer"), []string{"core/nodes.get"}, nil) },
			[]RoleKey{otherRole("elsewhere")}},
		{"deleting a role nobody has", func() { e.DeleteRole(acmeRole("ghost")) }, nil},
		{"deleting the middle", func() { e.DeleteRole(acmeRole("mid")) }, []RoleKey{acmeRole("mid"), acmeRole("top")}},
	} {
		before := snapshot()
		c.change()
		after := snapshot()
		for _, k := range keys {
			if changed := before[k] != after[k]; changed != slices.Contains(c.refreshed, k) {
				t.Errorf("%s: %s flattened again: %v", c.name, k, changed)
			}
		}
	}
	if got, want := effective(t, e, acmeRole("top")), []string{"core/events.get"}; !slices.Equal(got, want) {
		t.Errorf("top after its inherited role went: %v, want %v", got, want)
	}
	if got, want := effective(t, e, otherRole("elsewhere")), []string{"core/nodes.get", "core/pods.get"}; !slices.Equal(got, want) {
		t.Errorf("a role inheriting a platform role created after it: %v, want %v", got, want)
	}
	if _, ok := e.EffectivePermissions(acmeRole("mid")); ok {
		t.Error("a deleted role still has effective permissions")
	}
}

// A change is felt MaxInheritanceDepth steps up, and flattens nothing further.
func TestChangesReachOnlyAsFarAsInheritanceCounts(t *testing.T) {
	e := New()
	const n = MaxInheritanceDepth + 4
	chain := make([]RoleKey, n) // chain[i] inherits chain[i+1]: stored before the limit
	for i := range chain {
		chain[i] = acmeRole(fmt.Sprintf("r%d", i))
	}
	for i := n - 1; i >= 0; i-- {
		var inherits []RoleKey
		if i+1 < n {
			inherits = []RoleKey{chain[i+1]}
		}
		e.SetRole(chain[i], []string{fmt.Sprintf("core/configmaps.r%d", i)}, inherits)
	}
	sets := make([]*permSet, n)
	for i, k := range chain {
		sets[i] = published(e, k)
	}
	bottom := n - 1
	e.SetRole(chain[bottom], []string{"core/configmaps.changed"}, nil)
	for i, k := range chain {
		reaches := bottom-i <= MaxInheritanceDepth
		if changed := published(e, k) != sets[i]; changed != reaches {
			t.Errorf("%s, %d steps above the change: flattened again %v", k, bottom-i, changed)
		}
		if has := slices.Contains(effective(t, e, k), "core/configmaps.changed"); has != reaches {
			t.Errorf("%s, %d steps above the change: holds its permission %v", k, bottom-i, has)
		}
	}
}

func TestStoredInheritanceBeyondTheLimitsIsBounded(t *testing.T) {
	e := New()
	// A chain deeper than the limit: the top gets MaxInheritanceDepth steps of it.
	for i := range 20 {
		e.SetRole(acmeRole(fmt.Sprintf("deep%d", i)), []string{fmt.Sprintf("core/configmaps.d%d", i)}, []RoleKey{acmeRole(fmt.Sprintf("deep%d", i+1))})
	}
	if got := len(effective(t, e, acmeRole("deep0"))); got != MaxInheritanceDepth+1 {
		t.Errorf("the top of a 20-role chain holds %d permissions, want %d", got, MaxInheritanceDepth+1)
	}
	// A cycle stored by two racing writes: both hold both, once.
	e.SetRole(acmeRole("a"), []string{"core/configmaps.a"}, []RoleKey{acmeRole("b")})
	e.SetRole(acmeRole("b"), []string{"core/configmaps.b"}, []RoleKey{acmeRole("a")})
	for _, k := range []RoleKey{acmeRole("a"), acmeRole("b")} {
		if got, want := effective(t, e, k), []string{"core/configmaps.a", "core/configmaps.b"}; !slices.Equal(got, want) {
			t.Errorf("%s in a cycle: %v, want %v", k, got, want)
		}
	}
	// A role naming more roles than allowed: only the first MaxInheritedRoles count.
	var wide []RoleKey
	for i := range MaxInheritedRoles + 5 {
		k := acmeRole(fmt.Sprintf("leaf%d", i))
		e.SetRole(k, []string{fmt.Sprintf("core/configmaps.l%d", i)}, nil)
		wide = append(wide, k)
	}
	e.SetRole(acmeRole("wide"), nil, wide)
	perms := effective(t, e, acmeRole("wide"))
	if len(perms) != MaxInheritedRoles || !slices.Contains(perms, "core/configmaps.l0") || slices.Contains(perms, fmt.Sprintf("core/configmaps.l%d", MaxInheritedRoles)) {
		t.Errorf("a role inheriting %d roles: %v", len(wide), perms)
	}
}

func TestInheritanceStaysInTheNamespaceAndThePlatform(t *testing.T) {
	e := New()
	e.SetRole(otherRole("secret"), []string{"core/secrets.delete"}, nil)
	e.SetRole(acmeRole("mine"), []string{"core/configmaps.get"}, nil)
	e.SetRole(platformRole("viewer"), []string{"core/pods.get"}, nil)
	e.SetRole(RoleKey{"default", "stray"}, []string{"core/nodes.get"}, nil)
	for _, c := range []struct {
		name      string
		role      RoleKey
		inherits  []RoleKey
		effective []string
	}{
		{"its own organization's and the platform's", acmeRole("ok"), []RoleKey{acmeRole("mine"), platformRole("viewer")}, []string{"core/configmaps.get", "core/pods.get"}},
		{"another organization's", acmeRole("reach"), []RoleKey{otherRole("secret")}, nil},
		{"another organization's, not existing", acmeRole("probe"), []RoleKey{otherRole("nothing")}, nil},
		{"another namespace's", acmeRole("stray"), []RoleKey{{"default", "stray"}}, nil},
		{"a platform role inheriting an organization's", platformRole("leak"), []RoleKey{acmeRole("mine")}, nil},
		{"a platform role inheriting the platform's", platformRole("editor"), []RoleKey{platformRole("viewer")}, []string{"core/pods.get"}},
		{"through a platform role", acmeRole("via"), []RoleKey{platformRole("leak")}, nil},
	} {
		e.SetRole(c.role, nil, c.inherits)
		if got := effective(t, e, c.role); !slices.Equal(got, c.effective) {
			t.Errorf("%s: %v, want %v", c.name, got, c.effective)
		}
		// The Role controller's flattening agrees with the evaluator.
		perms, _ := Flatten(c.role, func(k RoleKey) ([]string, []RoleKey, bool) {
			e.rolesMu.RLock()
			defer e.rolesMu.RUnlock()
			r, ok := e.roles[k]
			var included []string
			for _, p := range r.included {
				included = append(included, p.String())
			}
			return included, r.inherited, ok
		})
		if !slices.Equal(perms, c.effective) {
			t.Errorf("%s: Flatten gives %v, want %v", c.name, perms, c.effective)
		}
	}
	// Another organization's role changing flattens nothing of acme's.
	before := published(e, acmeRole("reach"))
	e.SetRole(otherRole("secret"), []string{"core/secrets.get"}, nil)
	if published(e, acmeRole("reach")) != before {
		t.Error("a change in organization other flattened a role of acme")
	}
}

func TestFlattenReportsProblemsWithoutDisclosingOtherNamespaces(t *testing.T) {
	roles := map[RoleKey]struct {
		included  []string
		inherited []RoleKey
	}{
		acmeRole("base"):     {[]string{"core/configmaps.get"}, nil},
		otherRole("secret"):  {[]string{"core/secrets.get"}, nil},
		acmeRole("a"):        {nil, []RoleKey{acmeRole("b")}},
		acmeRole("b"):        {nil, []RoleKey{acmeRole("a")}},
		platformRole("base"): {[]string{"core/pods.get"}, nil},
	}
	for i := range 12 {
		roles[acmeRole(fmt.Sprintf("d%d", i))] = struct {
			included  []string
			inherited []RoleKey
		}{[]string{fmt.Sprintf("core/configmaps.d%d", i)}, []RoleKey{acmeRole(fmt.Sprintf("d%d", i+1))}}
	}
	var looked []RoleKey
	lookup := func(k RoleKey) ([]string, []RoleKey, bool) {
		looked = append(looked, k)
		r, ok := roles[k]
		return r.included, r.inherited, ok
	}
	many := make([]RoleKey, MaxInheritedRoles+1)
	for i := range many {
		many[i] = acmeRole("base")
	}
	for _, c := range []struct {
		name     string
		inherits []RoleKey
		perms    []string
		problem  string // a problem reported; "" for none
	}{
		{"fine", []RoleKey{acmeRole("base"), platformRole("base")}, []string{"core/configmaps.get", "core/pods.get"}, ""},
		{"missing", []RoleKey{acmeRole("nothing")}, nil, "inherited role organization-acme/nothing does not exist"},
		{"cycle", []RoleKey{acmeRole("a")}, nil, "inheritance cycle: organization-acme/x → organization-acme/a → organization-acme/b → organization-acme/a"},
		{"too deep", []RoleKey{acmeRole("d0")}, nil, "inheritance deeper than 8 levels: organization-acme/d8 (inherited by organization-acme/d7)"},
		{"too many", many, []string{"core/configmaps.get"}, fmt.Sprintf("organization-acme/x inherits %d roles: only the first %d count", MaxInheritedRoles+1, MaxInheritedRoles)},
		{"another organization's", []RoleKey{otherRole("secret")}, nil,
			"inherited role organization-other/secret is not available to organization-acme/x: a role inherits only roles of its own namespace and of milo-system"},
		{"another organization's, not existing", []RoleKey{otherRole("nothing")}, nil,
			"inherited role organization-other/nothing is not available to organization-acme/x: a role inherits only roles of its own namespace and of milo-system"},
	} {
		roles[acmeRole("x")] = struct {
			included  []string
			inherited []RoleKey
		}{nil, c.inherits}
		looked = nil
		perms, problems := Flatten(acmeRole("x"), lookup)
		if c.name == "too deep" {
			if len(perms) != MaxInheritanceDepth {
				t.Errorf("%s: %d permissions, want %d", c.name, len(perms), MaxInheritanceDepth)
			}
		} else if !slices.Equal(perms, c.perms) {
			t.Errorf("%s: permissions %v, want %v", c.name, perms, c.perms)
		}
		found := c.problem == "" && len(problems) == 0
		for _, p := range problems {
			found = found || c.problem != "" && strings.HasPrefix(p, c.problem)
		}
		if !found {
			t.Errorf("%s: problems %q, want %q", c.name, problems, c.problem)
		}
		for _, k := range looked {
			if k.Namespace == "organization-other" {
				t.Errorf("%s: another organization's role %s was looked up", c.name, k)
			}
		}
	}
}

func TestLongestChain(t *testing.T) {
	e := New()
	// acme: c0 ← c1 ← ... ← c5 (c1 inherits c0), c0 inherits the platform's owner ← editor ← viewer.
	e.SetRole(platformRole("viewer"), nil, nil)
	e.SetRole(platformRole("editor"), nil, []RoleKey{platformRole("viewer")})
	e.SetRole(platformRole("owner"), nil, []RoleKey{platformRole("editor")})
	e.SetRole(acmeRole("c0"), nil, []RoleKey{platformRole("owner")})
	for i := 1; i <= 5; i++ {
		e.SetRole(acmeRole(fmt.Sprintf("c%d", i)), nil, []RoleKey{acmeRole(fmt.Sprintf("c%d", i-1))})
	}
	// A stored cycle does not make the walk loop.
	e.SetRole(acmeRole("loop-a"), nil, []RoleKey{acmeRole("loop-b")})
	e.SetRole(acmeRole("loop-b"), nil, []RoleKey{acmeRole("loop-a")})
	steps := func(chain []RoleKey) int { return len(chain) - 1 }
	for _, c := range []struct {
		name     string
		role     RoleKey
		inherits []RoleKey
		steps    int
	}{
		{"nothing", acmeRole("alone"), nil, 0},
		{"the platform chain", acmeRole("new"), []RoleKey{platformRole("owner")}, 3},
		{"on top of acme's chain", acmeRole("new"), []RoleKey{acmeRole("c5")}, 9},
		{"the widest branch is not the deepest", acmeRole("new"), []RoleKey{platformRole("viewer"), acmeRole("c2"), acmeRole("c1")}, 6},
		// c0 changing to inherit viewer directly: c5 … c0 → viewer.
		{"in the middle, above", acmeRole("c0"), []RoleKey{platformRole("viewer")}, 6},
		{"in the middle, lengthening", acmeRole("c3"), []RoleKey{acmeRole("c2"), platformRole("owner")}, 8},
		{"missing roles count as a step", acmeRole("new"), []RoleKey{acmeRole("later")}, 1},
		{"another organization's roles do not count", acmeRole("new"), []RoleKey{otherRole("deep")}, 0},
		// acme's six roles above owner do not stop the platform changing it.
		{"a platform role ignores organizations' chains", platformRole("viewer"), []RoleKey{platformRole("base")}, 3},
		{"a stored cycle", acmeRole("new"), []RoleKey{acmeRole("loop-a")}, 2},
	} {
		chain := e.LongestChain(c.role, c.inherits)
		if steps(chain) != c.steps || !slices.Contains(chain, c.role) {
			t.Errorf("%s: %v (%d steps), want %d steps through %s", c.name, chain, steps(chain), c.steps, c.role)
		}
	}
	if got, want := e.LongestChain(acmeRole("new"), []RoleKey{acmeRole("c5")}), []RoleKey{acmeRole("new"), acmeRole("c5"), acmeRole("c4"),
		acmeRole("c3"), acmeRole("c2"), acmeRole("c1"), acmeRole("c0"), platformRole("owner"), platformRole("editor"), platformRole("viewer")}; !slices.Equal(got, want) {
		t.Errorf("chain %v, want %v", got, want)
	}
}

func TestBindingsFollowTheirRoleWhateverTheOrder(t *testing.T) {
	e := newTestEvaluator()
	web := Project("web")
	get := perm(t, "core/configmaps.get")
	// The binding comes first, its role later, goes, and comes back.
	e.SetBinding("organization-acme/bob", Binding{Role: acmeRole("reader"), Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &web, Scope: "acme"})
	for _, step := range []struct {
		name    string
		do      func()
		allowed bool
	}{
		{"no role yet", func() {}, false},
		{"the role appears", func() { e.SetRole(acmeRole("reader"), []string{"core/configmaps.get"}, nil) }, true},
		{"the role goes", func() { e.DeleteRole(acmeRole("reader")) }, false},
		{"the role comes back", func() { e.SetRole(acmeRole("reader"), []string{"core/configmaps.*"}, nil) }, true},
		{"the binding names another role", func() {
			e.SetBinding("organization-acme/bob", Binding{Role: acmeRole("nothing"), Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &web, Scope: "acme"})
		}, false},
	} {
		step.do()
		if ok, _ := e.Allowed(Request{User: "bob", Permission: get, Target: web}); ok != step.allowed {
			t.Errorf("%s: allowed %v, want %v", step.name, ok, step.allowed)
		}
	}
	e.DeleteBinding("organization-acme/bob")
	e.DeleteRole(acmeRole("reader"))
	e.cellsMu.Lock()
	defer e.cellsMu.Unlock()
	for _, k := range []RoleKey{acmeRole("reader"), acmeRole("nothing")} {
		if _, kept := e.cells[k]; kept {
			t.Errorf("the cell of %s outlives its role and bindings", k)
		}
	}
}

// A flattening in progress holds up no decision, binding or membership.
func TestDecisionsDoNotWaitForRoleChanges(t *testing.T) {
	e := newTestEvaluator()
	web := Project("web")
	e.SetBinding("organization-acme/bob", Binding{Role: platformRole("viewer"), Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &web})
	e.rolesMu.Lock() // as a change of roles does while it flattens
	done := make(chan struct{})
	go func() {
		defer close(done)
		if ok, _ := e.Allowed(Request{User: "bob", Permission: perm(t, "core/configmaps.get"), Target: web}); !ok {
			t.Error("bob denied")
		}
		_ = e.Permissions("bob", nil, web, nil)
		e.SetBinding("organization-acme/carol", Binding{Role: acmeRole("new"), Subjects: []Subject{{Kind: "User", Name: "carol"}}, Resource: &web})
		e.DeleteBinding("organization-acme/carol")
		e.SetParent(Project("later"), Organization("acme"))
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a decision waited for a change of roles")
	}
	e.rolesMu.Unlock()
}

// Run with -race: decisions, bindings and role changes at once.
func TestConcurrentRoleChangesAndDecisions(t *testing.T) {
	e := newTestEvaluator()
	web := Project("web")
	e.SetBinding("organization-acme/bob", Binding{Role: acmeRole("r0"), Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &web, Scope: "acme"})
	get := perm(t, "core/configmaps.get")
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			e.SetRole(acmeRole(fmt.Sprintf("r%d", i%5)), []string{"core/configmaps.get"}, []RoleKey{acmeRole(fmt.Sprintf("r%d", (i+1)%5))})
			if i%7 == 0 {
				e.DeleteRole(acmeRole(fmt.Sprintf("r%d", i%5)))
			}
		}
	})
	wg.Go(func() {
		for i := range 200 {
			e.SetBinding(fmt.Sprintf("organization-acme/b%d", i%3), Binding{Role: acmeRole(fmt.Sprintf("r%d", i%5)),
				Subjects: []Subject{{Kind: "User", Name: "carol"}}, Resource: &web, Scope: "acme"})
		}
	})
	wg.Go(func() {
		for range 500 {
			e.Allowed(Request{User: "bob", Permission: get, Target: web})
			e.Permissions("carol", nil, web, nil)
		}
	})
	wg.Wait()
	e.SetRole(acmeRole("r0"), []string{"core/configmaps.get"}, nil)
	if ok, _ := e.Allowed(Request{User: "bob", Permission: get, Target: web}); !ok {
		t.Fatal("bob's role, settled, does not grant")
	}
}
