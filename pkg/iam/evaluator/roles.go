package evaluator

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Limits of Role inheritance. Admission refuses Roles beyond them, and the
// evaluator and the Role controller honour them for Roles stored anyway
// (before the limits existed, or by two writes racing past admission), so that
// one Role's change costs a bounded amount of work whatever its tenant wrote.
const (
	// MaxInheritanceDepth is the number of inheritance steps below a Role
	// that count: the Role, a Role it inherits, a Role that one inherits, and
	// so on, at most MaxInheritanceDepth steps down (MaxInheritanceDepth+1
	// Roles in a chain). A change of a Role therefore flattens again only the
	// Roles at most this many steps above it. Permissions of Roles further
	// down a stored chain are not granted through it.
	MaxInheritanceDepth = 8
	// MaxInheritedRoles is the number of Roles one Role may name in
	// spec.inheritedRoles. Of a stored Role naming more, only the first
	// MaxInheritedRoles count.
	MaxInheritedRoles = 32
)

// PlatformNamespace holds the platform's roles, which every Role may inherit.
const PlatformNamespace = "milo-system"

// MayUseRole reports whether an IAM object in namespace may name a Role in
// roleNamespace — a Role inheriting it, or a PolicyBinding granting it: only a
// Role of its own namespace or one of the platform's. A Role of one
// organization inheriting another organization's would show that Role's
// permissions in its status, and its Ready condition whether that Role
// exists; a binding granting it would show the same through what it allows.
// The platform's Roles, which every organization inherits, use platform Roles
// only.
func MayUseRole(namespace, roleNamespace string) bool {
	return roleNamespace == namespace || roleNamespace == PlatformNamespace
}

// Inherits returns the inherited Roles that count for a Role in namespace:
// the first MaxInheritedRoles of inherited, less those MayUseRole refuses.
func Inherits(namespace string, inherited []RoleKey) []RoleKey {
	if len(inherited) > MaxInheritedRoles {
		inherited = inherited[:MaxInheritedRoles]
	}
	var out []RoleKey
	for _, in := range inherited {
		if MayUseRole(namespace, in.Namespace) {
			out = append(out, in)
		}
	}
	return out
}

// String formats k as namespace/name.
func (k RoleKey) String() string { return k.Namespace + "/" + k.Name }

// role is a Role as written, for telling whether an update changes it, and
// the inheritance that counts (Inherits).
type role struct {
	included  []Permission
	inherited []RoleKey
	edges     []RoleKey
}

// roleCell publishes one Role's flattened permissions. A set, once published,
// is never modified: a change of roles publishes new sets, so decisions read
// a consistent set with one atomic load and never wait for a flattening.
type roleCell struct {
	perms atomic.Pointer[permSet] // nil while no such Role exists
	// refs counts the bindings naming the Role; the cell is dropped when no
	// binding names it and the Role does not exist. Guarded by cellsMu.
	refs int
}

// permissions returns the Role's current permissions (nil for none).
func (c *roleCell) permissions() permSet {
	if set := c.perms.Load(); set != nil {
		return *set
	}
	return nil
}

// acquireCell returns the cell of a Role for a binding naming it.
func (e *Evaluator) acquireCell(key RoleKey) *roleCell {
	e.cellsMu.Lock()
	defer e.cellsMu.Unlock()
	c := e.cells[key]
	if c == nil {
		c = &roleCell{}
		e.cells[key] = c
	}
	c.refs++
	return c
}

// releaseCell undoes acquireCell once the binding's grants are gone.
func (e *Evaluator) releaseCell(key RoleKey) {
	e.cellsMu.Lock()
	defer e.cellsMu.Unlock()
	c := e.cells[key]
	if c == nil {
		return
	}
	if c.refs--; c.refs <= 0 && c.perms.Load() == nil {
		delete(e.cells, key)
	}
}

// SetRole records a Role and flattens again the Roles the change affects:
// itself and those inheriting it within MaxInheritanceDepth steps, never the
// others. A Role recorded again as it is (an informer's resync delivers every
// Role every few minutes) changes nothing and costs a comparison.
func (e *Evaluator) SetRole(key RoleKey, included []string, inherited []RoleKey) {
	e.rolesMu.Lock()
	defer e.rolesMu.Unlock()
	old, ok := e.roles[key]
	if ok && old.is(included, inherited) {
		return
	}
	r := role{inherited: slices.Clone(inherited), edges: Inherits(key.Namespace, inherited)}
	for _, s := range included {
		if p, ok := ParsePermission(s); ok {
			r.included = append(r.included, p)
		}
	}
	if ok {
		e.unlink(key, old.edges)
	}
	e.roles[key] = r
	e.link(key, r.edges)
	e.publish(key)
}

// is reports whether r is the Role written as included and inherited,
// without allocating: resyncs deliver every Role again.
func (r role) is(included []string, inherited []RoleKey) bool {
	if !slices.Equal(r.inherited, inherited) {
		return false
	}
	i := 0
	for _, s := range included {
		p, ok := ParsePermission(s)
		if !ok {
			continue
		}
		if i == len(r.included) || r.included[i] != p {
			return false
		}
		i++
	}
	return i == len(r.included)
}

// DeleteRole forgets a Role, and flattens again the Roles inheriting it.
func (e *Evaluator) DeleteRole(key RoleKey) {
	e.rolesMu.Lock()
	defer e.rolesMu.Unlock()
	old, ok := e.roles[key]
	if !ok {
		return
	}
	delete(e.roles, key)
	e.unlink(key, old.edges)
	e.publish(key)
}

func (e *Evaluator) link(key RoleKey, edges []RoleKey) {
	for _, in := range edges {
		set := e.inheritors[in]
		if set == nil {
			set = map[RoleKey]struct{}{}
			e.inheritors[in] = set
		}
		set[key] = struct{}{}
	}
}

func (e *Evaluator) unlink(key RoleKey, edges []RoleKey) {
	for _, in := range edges {
		set := e.inheritors[in]
		delete(set, key)
		if len(set) == 0 {
			delete(e.inheritors, in)
		}
	}
}

// affected returns changed and every Role whose flattened permissions may
// depend on it: those inheriting it, directly or not, within
// MaxInheritanceDepth steps (a Role further above does not reach it).
func (e *Evaluator) affected(changed RoleKey) []RoleKey {
	out := []RoleKey{changed}
	seen := map[RoleKey]struct{}{changed: {}}
	level := []RoleKey{changed}
	for step := 0; step < MaxInheritanceDepth && len(level) > 0; step++ {
		var next []RoleKey
		for _, k := range level {
			for in := range e.inheritors[k] {
				if _, ok := seen[in]; !ok {
					seen[in] = struct{}{}
					next = append(next, in)
				}
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// publish flattens the Roles a change of changed affects and publishes the
// new sets. Called with rolesMu held; decisions go on meanwhile, reading the
// previous sets.
func (e *Evaluator) publish(changed RoleKey) {
	affected := e.affected(changed)
	sets := make([]*permSet, len(affected))
	lookup := func(k RoleKey) ([]Permission, []RoleKey, bool) {
		r, ok := e.roles[k]
		return r.included, r.edges, ok
	}
	var scratch walkScratch
	for i, k := range affected {
		if _, ok := e.roles[k]; !ok {
			continue
		}
		set := permSet{}
		walk(k, lookup, func(ps []Permission) {
			for _, p := range ps {
				set[p] = struct{}{}
			}
		}, nil, &scratch)
		sets[i] = &set
	}
	e.cellsMu.Lock()
	defer e.cellsMu.Unlock()
	for i, k := range affected {
		c := e.cells[k]
		switch {
		case c != nil:
			c.perms.Store(sets[i])
			if sets[i] == nil && c.refs <= 0 {
				delete(e.cells, k)
			}
		case sets[i] != nil:
			c = &roleCell{}
			c.perms.Store(sets[i])
			e.cells[k] = c
		}
	}
}

// walk calls visit with the permissions of key and of every Role it
// inherits within MaxInheritanceDepth steps, each Role once, nearest first.
// lookup returns a Role's own permissions and the Roles it inherits as
// written; inheritance that does not count (Inherits) is not followed, so a
// cycle or an over-deep or over-wide graph stored before admission refused
// them costs at most one visit per Role reached. problem, when given, hears of
// what is wrong with the inheritance.
func walk[P any](key RoleKey, lookup func(RoleKey) ([]P, []RoleKey, bool), visit func([]P), problem func(string), scratch *walkScratch) {
	report := func(s string) {
		if problem != nil {
			problem(s)
		}
	}
	if scratch == nil {
		scratch = &walkScratch{}
	}
	if scratch.seen == nil {
		scratch.seen = map[RoleKey]struct{}{}
	}
	seen := scratch.seen
	clear(seen)
	seen[key] = struct{}{}
	level, next := append(scratch.level[:0], key), scratch.next[:0]
	defer func() { scratch.level, scratch.next = level[:0], next[:0] }()
	for depth := 0; len(level) > 0; depth++ {
		next = next[:0]
		for _, k := range level {
			included, inherited, ok := lookup(k)
			if !ok {
				report("inherited role " + k.String() + " does not exist")
				continue
			}
			visit(included)
			if len(inherited) > MaxInheritedRoles {
				report(k.String() + " inherits " + strconv.Itoa(len(inherited)) + " roles: only the first " + strconv.Itoa(MaxInheritedRoles) + " count")
				inherited = inherited[:MaxInheritedRoles]
			}
			for _, in := range inherited {
				switch _, done := seen[in]; {
				case !MayUseRole(k.Namespace, in.Namespace):
					// The same words whether the Role exists or not: nothing
					// of another namespace is looked at.
					report("inherited role " + in.String() + " is not available to " + k.String() +
						": a role inherits only roles of its own namespace and of " + PlatformNamespace)
				case done:
				case depth == MaxInheritanceDepth:
					report("inheritance deeper than " + strconv.Itoa(MaxInheritanceDepth) + " levels: " + in.String() +
						" (inherited by " + k.String() + ") and the roles below it are not included")
				default:
					seen[in] = struct{}{}
					next = append(next, in)
				}
			}
		}
		level, next = next, level
	}
}

// walkScratch is what walk needs, kept from one walk to the next when many
// Roles are flattened at once.
type walkScratch struct {
	seen        map[RoleKey]struct{}
	level, next []RoleKey
}

// Flatten returns the sorted, distinct permissions of a role and every role it
// inherits, read through lookup, and what is wrong with its inheritance (roles
// that do not exist or may not be inherited, cycles, limits exceeded), for the
// Role controller's status. It grants exactly what the evaluator grants.
func Flatten(key RoleKey, lookup func(RoleKey) (included []string, inherited []RoleKey, ok bool)) (perms []string, problems []string) {
	type def struct {
		inherited []RoleKey
		ok        bool
	}
	defs := map[RoleKey]def{}
	read := func(k RoleKey) ([]string, []RoleKey, bool) {
		included, inherited, ok := lookup(k)
		defs[k] = def{inherited, ok}
		return included, inherited, ok
	}
	report := func(p string) {
		if !slices.Contains(problems, p) {
			problems = append(problems, p)
		}
	}
	walk(key, read, func(ps []string) { perms = append(perms, ps...) }, report, nil)
	// A cycle among the roles reached (admission refuses them, but two writes
	// can race past it).
	visiting, done := map[RoleKey]bool{}, map[RoleKey]bool{}
	var path []string
	var dfs func(RoleKey) bool
	dfs = func(k RoleKey) bool {
		path = append(path, k.String())
		if visiting[k] {
			report("inheritance cycle: " + strings.Join(path, " → "))
			return true
		}
		d, ok := defs[k]
		if done[k] || !ok || !d.ok {
			path = path[:len(path)-1]
			return false
		}
		visiting[k] = true
		for _, in := range Inherits(k.Namespace, d.inherited) {
			if dfs(in) {
				return true
			}
		}
		visiting[k], done[k] = false, true
		path = path[:len(path)-1]
		return false
	}
	dfs(key)
	slices.Sort(perms)
	return slices.Compact(perms), problems
}

// EffectivePermissions returns the flattened permissions of a role, sorted by
// the caller if needed; ok is false for an unknown role.
func (e *Evaluator) EffectivePermissions(key RoleKey) (perms []string, ok bool) {
	e.cellsMu.Lock()
	c := e.cells[key]
	e.cellsMu.Unlock()
	if c == nil {
		return nil, false
	}
	set := c.perms.Load()
	if set == nil {
		return nil, false
	}
	for p := range *set {
		perms = append(perms, p.String())
	}
	return perms, true
}

// Cycle reports a chain of inherited roles from key back to itself, if any,
// were key to inherit inherited. Only inheritance that counts is followed.
func (e *Evaluator) Cycle(key RoleKey, inherited []RoleKey) []RoleKey {
	e.rolesMu.RLock()
	defer e.rolesMu.RUnlock()
	var path []RoleKey
	seen := map[RoleKey]bool{}
	var walk func(RoleKey, []RoleKey) bool
	walk = func(k RoleKey, children []RoleKey) bool {
		path = append(path, k)
		for _, c := range children {
			if c == key {
				path = append(path, c)
				return true
			}
			if seen[c] {
				continue
			}
			seen[c] = true
			if walk(c, e.roles[c].edges) {
				return true
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if walk(key, Inherits(key.Namespace, inherited)) {
		return path
	}
	return nil
}

// LongestChain returns the longest chain of inheritance that would pass
// through key were key to inherit inherited: from the Role furthest above key
// among those of key's namespace inheriting it, through key, down to the Role
// furthest below; len(chain)-1 is the number of steps, which admission holds
// to MaxInheritanceDepth. Roles of other namespaces inheriting key do not
// count, so that no organization's Roles can stop the platform from changing
// its own (an organization's chain that a platform change makes too deep
// loses the Roles beyond the limit, see walk). Only inheritance that counts is
// followed, and cycles are cut (admission refuses them on their own).
func (e *Evaluator) LongestChain(key RoleKey, inherited []RoleKey) []RoleKey {
	e.rolesMu.RLock()
	defer e.rolesMu.RUnlock()
	// Whichever of two equally long branches comes first by name, so that
	// messages do not change from one attempt to the next.
	better := func(n, best int, k, bestKey RoleKey) bool {
		return n > best || n == best && (k.Namespace < bestKey.Namespace || k.Namespace == bestKey.Namespace && k.Name < bestKey.Name)
	}

	visiting := map[RoleKey]bool{key: true}
	below, belowNext := map[RoleKey]int{}, map[RoleKey]RoleKey{}
	var down func(k RoleKey, edges []RoleKey) int
	down = func(k RoleKey, edges []RoleKey) int {
		best := 0
		for _, in := range edges {
			if visiting[in] {
				continue
			}
			n, ok := below[in]
			if !ok {
				visiting[in] = true
				n = down(in, e.roles[in].edges)
				visiting[in] = false
				below[in] = n
			}
			if next, ok := belowNext[k]; !ok || better(n+1, best, in, next) {
				best, belowNext[k] = n+1, in
			}
		}
		return best
	}
	down(key, Inherits(key.Namespace, inherited))

	clear(visiting)
	visiting[key] = true
	above, aboveNext := map[RoleKey]int{}, map[RoleKey]RoleKey{}
	var up func(k RoleKey) int
	up = func(k RoleKey) int {
		best := 0
		for in := range e.inheritors[k] {
			if in.Namespace != key.Namespace || visiting[in] {
				continue
			}
			n, ok := above[in]
			if !ok {
				visiting[in] = true
				n = up(in)
				visiting[in] = false
				above[in] = n
			}
			if next, ok := aboveNext[k]; !ok || better(n+1, best, in, next) {
				best, aboveNext[k] = n+1, in
			}
		}
		return best
	}
	up(key)

	// In a stored cycle the memoized branches can lead back onto the chain;
	// it ends there.
	onChain := map[RoleKey]bool{key: true}
	follow := func(next map[RoleKey]RoleKey) (out []RoleKey) {
		for k, ok := next[key]; ok && !onChain[k]; k, ok = next[k] {
			onChain[k] = true
			out = append(out, k)
		}
		return out
	}
	chain := follow(aboveNext)
	slices.Reverse(chain)
	chain = append(chain, key)
	return append(chain, follow(belowNext)...)
}
