package evaluator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
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

// BenchmarkAuthorizeDuringRoleChurn measures one organization's decisions
// while another organization rewrites its 1,000 Roles as fast as the evaluator
// takes the changes, as one informer delivers them:
//
//   - chains: 125 chains of 8 Roles, each inheriting the one before; every
//     change rewrites the first Role of a chain, which the 7 others inherit;
//   - shared-base: 1,000 Roles inheriting one base Role; every change rewrites
//     the base, which all 1,000 inherit;
//   - resync: every Role delivered again unchanged, as an informer's resync
//     does every few minutes.
//
// Decisions are timed one by one, in blocks alternating between no churn and
// churn, so that both see the same machine. It reports p50 and p99 of each
// (p50-ns, p99-ns under churn; idle-p50-ns, idle-p99-ns without), the ratio
// of the p99s, and how many Role changes the churn made per second. ns/op is
// a decision under churn plus its timing; B/op and allocs/op count the
// churn's allocations (BenchmarkAuthorize shows decisions make none).
func BenchmarkAuthorizeDuringRoleChurn(b *testing.B) {
	const churnNS = "organization-churn"
	key := func(format string, args ...any) RoleKey { return RoleKey{churnNS, fmt.Sprintf(format, args...)} }
	// Changes alternate between two definitions made beforehand, so that the
	// garbage measured is the evaluator's.
	toggles := [2][]string{{"core/configmaps.get"}, {"core/configmaps.list"}}
	toggle := func(i int) []string { return toggles[i%2] }
	scenarios := []struct {
		name string
		// setup writes the churning organization's Roles and returns its i-th change.
		setup func(e *Evaluator) func(i int)
	}{
		{"chains", func(e *Evaluator) func(int) {
			const chains, length = 125, 8
			for c := range chains {
				e.SetRole(key("c%d-0", c), toggle(0), nil)
				for l := 1; l < length; l++ {
					e.SetRole(key("c%d-%d", c, l), []string{fmt.Sprintf("core/secrets.get-%d", l)}, []RoleKey{key("c%d-%d", c, l-1)})
				}
			}
			roots := make([]RoleKey, chains)
			for c := range roots {
				roots[c] = key("c%d-0", c)
			}
			return func(i int) { e.SetRole(roots[i%chains], toggle(i/chains+1), nil) }
		}},
		{"shared-base", func(e *Evaluator) func(int) {
			e.SetRole(key("base"), toggle(0), nil)
			for r := range 1000 {
				e.SetRole(key("r%d", r), []string{fmt.Sprintf("core/secrets.get-%d", r)}, []RoleKey{key("base")})
			}
			base := key("base")
			return func(i int) { e.SetRole(base, toggle(i+1), nil) }
		}},
		{"resync", func(e *Evaluator) func(int) {
			e.SetRole(key("base"), toggle(0), nil)
			for r := range 999 {
				e.SetRole(key("r%d", r), []string{fmt.Sprintf("core/secrets.get-%d", r)}, []RoleKey{key("base")})
			}
			base, inherits := key("base"), []RoleKey{key("base")}
			keys, perms := make([]RoleKey, 999), make([][]string, 999)
			for r := range keys {
				keys[r], perms[r] = key("r%d", r), []string{fmt.Sprintf("core/secrets.get-%d", r)}
			}
			return func(i int) {
				if r := i % 1000; r == 999 {
					e.SetRole(base, toggle(0), nil)
				} else {
					e.SetRole(keys[r], perms[r], inherits)
				}
			}
		}},
	}
	get, _ := ParsePermission("core/configmaps.get")
	for _, sc := range scenarios {
		w := buildWorld(10, 100, 10_000, 10_000)
		change := sc.setup(w.e)
		// The churning organization's roles are bound, as they would be.
		churnOrg := Organization("churn")
		for r := range 10 {
			w.e.SetBinding(fmt.Sprintf("%s/b-%d", churnNS, r), Binding{Role: key("r%d", r),
				Subjects: []Subject{{Kind: "User", Name: "mallory"}}, Resource: &churnOrg, Scope: "churn"})
		}
		// The other tenant: an object in a project four folders deep, the grant on its organization.
		org := Organization("org-7")
		w.e.SetBinding("bob-on-org", Binding{Role: RoleKey{"milo-system", "viewer"},
			Subjects: []Subject{{Kind: "User", Name: "bob"}}, Resource: &org, Scope: "org-7"})
		req := Request{User: "bob", Groups: []string{"system:authenticated"}, Permission: get, Target: Project("org-7-p4"),
			Object: ProjectObject("org-7-p4", "", "configmaps", "default", "settings")}
		// The churn's count of changes lives on its own goroutine's stack: a
		// counter shared with the decisions' goroutine would put a cache line
		// between them that the evaluator does not have.
		changes := 0
		b.Run(sc.name, func(b *testing.B) {
			e := w.e
			measure := func(lat []time.Duration) {
				e, req := e, req
				for i := range lat {
					start := time.Now()
					ok, _ := e.Allowed(req)
					lat[i] = time.Since(start)
					if !ok {
						b.Fatal("the other tenant's decision changed")
					}
				}
			}
			// churn makes changes until stopped, and returns once the first
			// one is made, so that what is timed next runs under churn; stop
			// returns how many were made.
			churn := func() (stop func() int) {
				done, started, made := make(chan struct{}), make(chan struct{}), make(chan int)
				go func(first int) {
					n := 0
					for {
						change(first + n)
						if n++; n == 1 {
							close(started)
						}
						select {
						case <-done:
							made <- n
							return
						default:
						}
					}
				}(changes)
				<-started
				return func() int {
					close(done)
					n := <-made
					changes += n
					return n
				}
			}
			idle, churned := make([]time.Duration, b.N), make([]time.Duration, b.N)
			const blocks = 10
			var churnTime time.Duration
			var churnChanges int
			b.ResetTimer()
			for k := range blocks {
				lo, hi := k*b.N/blocks, (k+1)*b.N/blocks
				b.StopTimer()
				measure(idle[lo:hi])
				start := time.Now()
				stop := churn()
				b.StartTimer()
				measure(churned[lo:hi])
				b.StopTimer()
				churnChanges += stop()
				churnTime += time.Since(start)
				b.StartTimer()
			}
			b.StopTimer()
			idleP50, idleP99 := percentiles(idle)
			p50, p99 := percentiles(churned)
			b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(idleP50.Nanoseconds()), "idle-p50-ns")
			b.ReportMetric(float64(idleP99.Nanoseconds()), "idle-p99-ns")
			b.ReportMetric(float64(p99)/float64(max(idleP99, 1)), "p99-ratio")
			b.ReportMetric(float64(churnChanges)/churnTime.Seconds(), "changes/s")
		})
	}
}

// percentiles sorts lat and returns its 50th and 99th percentiles.
func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}
