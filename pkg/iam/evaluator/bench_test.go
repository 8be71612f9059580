package evaluator

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// world is a hierarchy for the benchmark: orgs organizations, each with
// projectsPerOrg projects spread over a folder chain of depth 4 (a fifth of the
// projects directly under the organization, a fifth at each folder depth), and
// bindings spread over projects and organizations, one subject each, drawn from
// users users.
type world struct {
	e        *Evaluator
	orgs     int
	perOrg   int
	users    int
	bindings int
}

const benchFolderDepth = 4

func buildWorld(orgs, perOrg, users, bindings int) *world {
	e := New()
	e.SetRole(RoleKey{"milo-system", "viewer"}, []string{"core/configmaps.get", "core/configmaps.list"}, nil)
	e.SetRole(RoleKey{"milo-system", "editor"}, []string{"core/configmaps.create"}, []RoleKey{{"milo-system", "viewer"}})
	e.SetRole(RoleKey{"milo-system", "owner"}, []string{"resourcemanager.miloapis.com/projects.delete"}, []RoleKey{{"milo-system", "editor"}})
	roles := []RoleKey{{"milo-system", "viewer"}, {"milo-system", "editor"}, {"milo-system", "owner"}}
	for o := range orgs {
		org := Organization(fmt.Sprintf("org-%d", o))
		parent := org
		for d := range benchFolderDepth {
			f := Folder(fmt.Sprintf("org-%d-f%d", o, d))
			e.SetParent(f, parent)
			parent = f
		}
		for p := range perOrg {
			var owner Node
			if depth := p % (benchFolderDepth + 1); depth == 0 {
				owner = org
			} else {
				owner = Folder(fmt.Sprintf("org-%d-f%d", o, depth-1))
			}
			e.SetParent(Project(fmt.Sprintf("org-%d-p%d", o, p)), owner)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	projects := orgs * perOrg
	for i := range bindings {
		var at Node
		if i%10 == 0 {
			at = Organization(fmt.Sprintf("org-%d", rng.IntN(orgs)))
		} else {
			n := rng.IntN(projects)
			at = Project(fmt.Sprintf("org-%d-p%d", n/perOrg, n%perOrg))
		}
		e.SetBinding(fmt.Sprintf("b-%d", i), Binding{Role: roles[i%len(roles)],
			Subjects: []Subject{{Kind: "User", Name: fmt.Sprintf("user-%d", rng.IntN(users))}}, Resource: &at})
	}
	return &world{e: e, orgs: orgs, perOrg: perOrg, users: users, bindings: bindings}
}

// BenchmarkAuthorize measures decisions at depth 1 (the binding is on the
// project acted on) and depth 6 (an object in a project four folders deep, the
// binding on the organization), allowed and denied, with 1,000 and 100,000
// projects. The ratio between the two sizes is what matters.
func BenchmarkAuthorize(b *testing.B) {
	for _, size := range []struct {
		name                          string
		orgs, perOrg, users, bindings int
	}{
		{"projects=1000", 10, 100, 10_000, 10_000},
		{"projects=100000", 1000, 100, 10_000, 1_000_000},
	} {
		w := buildWorld(size.orgs, size.perOrg, size.users, size.bindings)
		get, _ := ParsePermission("core/configmaps.get")
		// The subjects under test hold exactly these grants.
		shallow := Project("org-7-p5") // p5 % 5 == 0: directly under the organization
		w.e.SetBinding("alice-on-project", Binding{Role: RoleKey{"milo-system", "viewer"},
			Subjects: []Subject{{Kind: "User", Name: "alice"}}, Resource: &shallow})
		org := Organization("org-7")
		w.e.SetBinding("bob-on-org", Binding{Role: RoleKey{"milo-system", "viewer"},
			Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &org})
		deep := Project("org-7-p4") // p4 % 5 == 4: below four folders
		// Requests inside a project name the object as the authorizer does.
		object := ProjectObject("org-7-p4", "", "configmaps", "default", "settings")

		cases := []struct {
			name  string
			req   Request
			allow bool
		}{
			{"allow/depth=1", Request{User: "alice", Groups: []string{"system:authenticated"}, Permission: get, Target: shallow}, true},
			{"deny/depth=1", Request{User: "carol", Groups: []string{"system:authenticated"}, Permission: get, Target: shallow}, false},
			{"allow/depth=6", Request{User: "bob", Groups: []string{"system:authenticated"}, Permission: get, Target: deep, Object: object}, true},
			{"deny/depth=6", Request{User: "carol", Groups: []string{"system:authenticated"}, Permission: get, Target: deep, Object: object}, false},
		}
		for _, c := range cases {
			b.Run(size.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if ok, _ := w.e.Allowed(c.req); ok != c.allow {
						b.Fatalf("decision %v, want %v", ok, c.allow)
					}
				}
			})
		}
	}
}
