// Package evaluator makes Milo IAM's authorization decisions in process.
//
// Its state is a compact index built from the informers of Roles,
// PolicyBindings, GroupMemberships, Folders and Projects (see Sync): the parent
// of every Folder and Project, the effective permissions of every Role, and,
// for every resource a binding names, the roles each subject holds there. A
// decision walks from the requested object up its ancestry — object → Project →
// Folder(s) → Organization — and at each step looks up the requesting subjects
// (the user, its authenticated groups, its Group memberships) in a map. Its cost
// depends on the depth of the hierarchy and the number of the user's groups,
// never on how many projects, users or bindings exist.
//
// Nor on what other tenants do with their Roles: a change of a Role flattens
// again only the Roles inheriting it (within MaxInheritanceDepth), outside the
// lock decisions take, and publishes each Role's permissions as an immutable
// set that decisions read with one atomic load.
package evaluator

import (
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Node is one resource a binding can name and a decision can pass through.
type Node struct {
	// Group and Resource identify the kind, e.g. resourcemanager.miloapis.com
	// and projects; "" and configmaps for core ConfigMaps.
	Group, Resource string
	// Namespace and Name identify the object.
	Namespace, Name string
}

// Milo's hierarchy kinds.
const (
	ResourceManagerGroup = "resourcemanager.miloapis.com"
)

// Organization, Folder and Project return the node of a hierarchy object.
func Organization(name string) Node {
	return Node{Group: ResourceManagerGroup, Resource: "organizations", Name: name}
}

// Folder returns the node of a Folder.
func Folder(name string) Node {
	return Node{Group: ResourceManagerGroup, Resource: "folders", Name: name}
}

// Project returns the node of a Project.
func Project(name string) Node {
	return Node{Group: ResourceManagerGroup, Resource: "projects", Name: name}
}

// ProjectObject returns the node of an object inside a project. Objects are
// not in the index as nodes: a request naming one asks about it first (see
// Request.Object), then about its project and the project's ancestors.
func ProjectObject(project, group, resource, namespace, name string) Node {
	return Node{Group: group, Resource: resource, Namespace: project + "/" + namespace, Name: name}
}

// NodeOfKind returns the node of a Kind's object, as PolicyBindings name it.
func NodeOfKind(apiGroup, kind, namespace, name string) Node {
	return Node{Group: apiGroup, Resource: resourceOf(apiGroup, kind), Namespace: namespace, Name: name}
}

func resourceOf(apiGroup, kind string) string {
	plural, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Group: apiGroup, Kind: kind})
	return plural.Resource
}

// Permission is one parsed permission string, {apiGroup}/{resource}.{verb}.
type Permission struct{ Group, Resource, Verb string }

// ParsePermission parses "{apiGroup}/{resource}.{verb}" ("core" for the core
// group). Resource may name a subresource ("projects/status"); "*" as resource
// or verb matches any.
func ParsePermission(s string) (Permission, bool) {
	slash := strings.Index(s, "/")
	dot := strings.LastIndex(s, ".")
	if slash <= 0 || dot <= slash+1 || dot == len(s)-1 {
		return Permission{}, false
	}
	group := s[:slash]
	if group == "core" {
		group = ""
	}
	return Permission{Group: group, Resource: s[slash+1 : dot], Verb: s[dot+1:]}, true
}

// String formats p as a permission string.
func (p Permission) String() string {
	g := p.Group
	if g == "" {
		g = "core"
	}
	return g + "/" + p.Resource + "." + p.Verb
}

// Registered returns the permissions ProtectedResources register.
func (e *Evaluator) Registered() *Registered { return &e.registered }

// Subject is an identity bindings grant to.
type Subject struct {
	// Kind is User, Group or ServiceAccount.
	Kind string
	// Name, and Namespace for a Group object or a ServiceAccount.
	Namespace, Name string
}

// RoleKey names a Role.
type RoleKey struct{ Namespace, Name string }

// Binding is what the evaluator keeps of one PolicyBinding.
type Binding struct {
	Role     RoleKey
	Subjects []Subject
	// Exactly one of Resource (a resourceRef) and Kind (a resourceKind) is set.
	Resource *Node
	Kind     *schema.GroupResource
	// Scope is the organization the binding was made in, or "" for the
	// platform's. A binding of an organization grants nothing outside it, so
	// nobody can grant themselves access to another organization's resources.
	Scope string
}

type permSet map[Permission]struct{}

func (s permSet) allows(p Permission) bool {
	if _, ok := s[p]; ok {
		return true
	}
	for _, q := range []Permission{{p.Group, p.Resource, "*"}, {p.Group, "*", p.Verb}, {p.Group, "*", "*"}, {"*", "*", p.Verb}, {"*", "*", "*"}} {
		if _, ok := s[q]; ok {
			return true
		}
	}
	return false
}

// grant is one role held by one subject at one node (or kind).
type grant struct {
	// role is where the role's permissions are published: a decision reads
	// them without a map lookup and without waiting for a change of roles.
	role    *roleCell
	binding string
	scope   string
}

// Evaluator holds the index. It is safe for concurrent use.
type Evaluator struct {
	// registered are the permissions ProtectedResources register, which
	// Roles may grant.
	registered Registered

	// mu guards what decisions read, except roles' permissions: the
	// hierarchy, bindings and memberships. Its writers hold it for a few map
	// operations only.
	mu       sync.RWMutex
	parents  map[Node]Node
	onNode   map[Node]map[Subject][]grant
	onKind   map[schema.GroupResource]map[Subject][]grant
	bindings map[string]Binding
	// memberships maps a membership's key to its user and group; groupsOf
	// indexes the same by user.
	memberships map[string][2]string
	groupsOf    map[string][]Subject

	// Keeps what decisions read off the cache lines role changes write
	// (rolesMu above all): sharing one would make every role change cost
	// decisions on other cores a cache miss.
	_ [128]byte

	// Roles live apart from mu, so that flattening one tenant's roles never
	// holds up another tenant's decisions: a change of a Role flattens the
	// Roles it affects under rolesMu and publishes each new set in the Role's
	// cell (see roles.go).
	rolesMu sync.RWMutex
	roles   map[RoleKey]role
	// inheritors indexes, by Role, the Roles that inherit it directly.
	inheritors map[RoleKey]map[RoleKey]struct{}
	// cellsMu guards cells and their reference counts; it is held for map
	// operations only.
	cellsMu sync.Mutex
	cells   map[RoleKey]*roleCell
}

// New returns an empty evaluator.
func New() *Evaluator {
	return &Evaluator{
		parents:     map[Node]Node{},
		onNode:      map[Node]map[Subject][]grant{},
		onKind:      map[schema.GroupResource]map[Subject][]grant{},
		bindings:    map[string]Binding{},
		memberships: map[string][2]string{},
		groupsOf:    map[string][]Subject{},
		roles:       map[RoleKey]role{},
		inheritors:  map[RoleKey]map[RoleKey]struct{}{},
		cells:       map[RoleKey]*roleCell{},
	}
}

// SetParent records the parent of a Folder or Project.
func (e *Evaluator) SetParent(child, parent Node) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.parents[child] = parent
}

// HasParent reports whether the index knows the parent of a Folder or Project.
func (e *Evaluator) HasParent(n Node) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	_, ok := e.parents[n]
	return ok
}

// DeleteNode forgets a Folder or Project.
func (e *Evaluator) DeleteNode(n Node) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.parents, n)
}

// SetBinding indexes a PolicyBinding under key (its namespace/name).
func (e *Evaluator) SetBinding(key string, b Binding) {
	// The role's cell is taken before mu: a decision never waits on cellsMu.
	cell := e.acquireCell(b.Role)
	e.mu.Lock()
	old, replaced := e.unindex(key)
	e.bindings[key] = b
	g := grant{role: cell, binding: key, scope: b.Scope}
	for _, s := range b.Subjects {
		switch {
		case b.Resource != nil:
			add(e.onNode, *b.Resource, s, g)
		case b.Kind != nil:
			add(e.onKind, *b.Kind, s, g)
		}
	}
	e.mu.Unlock()
	if replaced {
		e.releaseCell(old.Role)
	}
}

// DeleteBinding forgets a PolicyBinding.
func (e *Evaluator) DeleteBinding(key string) {
	e.mu.Lock()
	old, ok := e.unindex(key)
	e.mu.Unlock()
	if ok {
		e.releaseCell(old.Role)
	}
}

func add[K comparable](index map[K]map[Subject][]grant, at K, s Subject, g grant) {
	bySubject := index[at]
	if bySubject == nil {
		bySubject = map[Subject][]grant{}
		index[at] = bySubject
	}
	bySubject[s] = append(bySubject[s], g)
}

func remove[K comparable](index map[K]map[Subject][]grant, at K, s Subject, binding string) {
	bySubject := index[at]
	grants := bySubject[s]
	for i := 0; i < len(grants); i++ {
		if grants[i].binding == binding {
			grants = append(grants[:i], grants[i+1:]...)
			i--
		}
	}
	if len(grants) == 0 {
		delete(bySubject, s)
	} else {
		bySubject[s] = grants
	}
	if len(bySubject) == 0 {
		delete(index, at)
	}
}

// unindex forgets a binding and returns it.
func (e *Evaluator) unindex(key string) (Binding, bool) {
	b, ok := e.bindings[key]
	if !ok {
		return b, false
	}
	delete(e.bindings, key)
	for _, s := range b.Subjects {
		switch {
		case b.Resource != nil:
			remove(e.onNode, *b.Resource, s, key)
		case b.Kind != nil:
			remove(e.onKind, *b.Kind, s, key)
		}
	}
	return b, true
}

// SetMembership records that user belongs to a Group object (namespace/name).
func (e *Evaluator) SetMembership(key, user string, group Subject) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unmember(key)
	e.memberships[key] = [2]string{user, group.Namespace + "/" + group.Name}
	e.groupsOf[user] = append(e.groupsOf[user], Subject{Kind: "Group", Namespace: group.Namespace, Name: group.Name})
}

// DeleteMembership forgets a GroupMembership.
func (e *Evaluator) DeleteMembership(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unmember(key)
}

func (e *Evaluator) unmember(key string) {
	m, ok := e.memberships[key]
	if !ok {
		return
	}
	delete(e.memberships, key)
	groups := e.groupsOf[m[0]]
	for i, g := range groups {
		if g.Namespace+"/"+g.Name == m[1] {
			groups = append(groups[:i], groups[i+1:]...)
			break
		}
	}
	if len(groups) == 0 {
		delete(e.groupsOf, m[0])
	} else {
		e.groupsOf[m[0]] = groups
	}
}

// Request is what a decision needs to know.
type Request struct {
	// User and Groups are the authenticated identity.
	User   string
	Groups []string
	// Permission asked for.
	Permission Permission
	// Target is the hierarchy object acted on, or the innermost hierarchy node
	// of a request (the project of a request inside it).
	Target Node
	// Object, when set, is the object inside Target's project that the
	// request names (ProjectObject); bindings on it are checked first.
	Object Node
	// Ancestry supplies parents the index does not have yet (a project created
	// a moment ago); the index's own parents come first.
	Ancestry []Edge
}

// Edge is a Folder's or Project's parent.
type Edge struct{ Child, Parent Node }

func parentIn(edges []Edge, child Node) (Node, bool) {
	for _, e := range edges {
		if e.Child == child {
			return e.Parent, true
		}
	}
	return Node{}, false
}

// maxDepth bounds walks up the hierarchy: object, project, eight folders, organization.
const maxDepth = 12

// Allowed reports whether some binding on the target, one of its ancestors, or
// its kind grants the permission to the user, one of its authenticated groups or
// one of its Group memberships; reason names the binding.
func (e *Evaluator) Allowed(r Request) (allowed bool, reason string) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var chain [maxDepth]Node
	n, org := e.ancestry(r.Target, r.Ancestry, &chain)
	if r.Object.Name != "" {
		if bySubject := e.onNode[r.Object]; bySubject != nil {
			if b, ok := e.match(bySubject, r, org); ok {
				return true, b
			}
		}
	}
	at := e.grantedAt(r.Permission)
	for _, node := range chain[:n] {
		if !grants(at, node) {
			continue
		}
		if bySubject := e.onNode[node]; bySubject != nil {
			if b, ok := e.match(bySubject, r, org); ok {
				return true, b
			}
		}
	}
	if bySubject := e.onKind[schema.GroupResource{Group: r.Permission.Group, Resource: r.Permission.Resource}]; bySubject != nil {
		if b, ok := e.match(bySubject, r, org); ok {
			return true, b
		}
	}
	return false, ""
}

// grantedAt returns the levels of the hierarchy whose bindings grant p, as
// the ProtectedResources of its kind say (a subresource is its kind's).
func (e *Evaluator) grantedAt(p Permission) Levels {
	if p.Group == "*" || p.Resource == "*" {
		return AnyLevel
	}
	return e.registered.GrantedAt(kindOf(p))
}

// grants reports whether a binding on node may grant a kind granted at the
// levels at. A node that is no level of the hierarchy (an object) always may.
func grants(at Levels, node Node) bool {
	l := levelOfNode(node)
	return l == 0 || at&l != 0
}

// ancestry returns the target and its ancestors, nearest first, and the
// organization at the root ("" if the chain does not end at one). A binding
// counts only inside its own organization.
func (e *Evaluator) ancestry(target Node, extra []Edge, chain *[maxDepth]Node) (n int, org string) {
	for node, ok := target, true; ok && n < maxDepth; {
		chain[n] = node
		n++
		var parent Node
		if parent, ok = e.parents[node]; !ok {
			parent, ok = parentIn(extra, node)
		}
		node = parent
	}
	if root := chain[n-1]; root.Group == ResourceManagerGroup && root.Resource == "organizations" {
		org = root.Name
	}
	return n, org
}

// match looks up every subject of the request; a grant must be the platform's
// or made in org.
func (e *Evaluator) match(bySubject map[Subject][]grant, r Request, org string) (binding string, found bool) {
	e.eachGrant(bySubject, r.User, r.Groups, org, func(g grant) bool {
		if set := g.role.perms.Load(); set != nil && set.allows(r.Permission) {
			binding, found = g.binding, true
		}
		return found
	})
	return binding, found
}

// eachGrant calls fn with every grant in bySubject of the user, its
// authenticated groups and its Group memberships that counts in org, until fn
// returns true.
func (e *Evaluator) eachGrant(bySubject map[Subject][]grant, user string, groups []string, org string, fn func(grant) bool) {
	check := func(s Subject) bool {
		for _, g := range bySubject[s] {
			if (g.scope == "" || g.scope == org) && fn(g) {
				return true
			}
		}
		return false
	}
	if check(Subject{Kind: "User", Name: user}) {
		return
	}
	if ns, name, ok := serviceAccount(user); ok && check(Subject{Kind: "ServiceAccount", Namespace: ns, Name: name}) {
		return
	}
	for _, g := range groups {
		if check(Subject{Kind: "Group", Name: g}) {
			return
		}
	}
	for _, g := range e.groupsOf[user] {
		if check(g) {
			return
		}
	}
}

// Permissions returns what a user holds on the target: the permissions of
// every role bound to it (or its groups) on the target or an ancestor, and of
// kind bindings, narrowed to their kind. It answers "what can I do here"
// (SelfSubjectRulesReview); decisions use Allowed.
func (e *Evaluator) Permissions(user string, groups []string, target Node, ancestry []Edge) []Permission {
	out := map[Permission]struct{}{}
	e.eachPermission(user, groups, target, ancestry, func(p Permission) bool {
		out[p] = struct{}{}
		return false
	})
	// Sorted by their names, each name made once: a comparator that made
	// them would allocate twice per comparison.
	type named struct {
		name string
		p    Permission
	}
	sorted := make([]named, 0, len(out))
	for p := range out {
		sorted = append(sorted, named{p.String(), p})
	}
	slices.SortFunc(sorted, func(a, b named) int { return strings.Compare(a.name, b.name) })
	perms := make([]Permission, len(sorted))
	for i, n := range sorted {
		perms[i] = n.p
	}
	return perms
}

// GrantsAny reports whether Permissions would return anything, without
// building the list: it is asked of every request in a project (whether its
// user belongs there at all), where the list is asked for only by a review.
func (e *Evaluator) GrantsAny(user string, groups []string, target Node, ancestry []Edge) bool {
	found := false
	e.eachPermission(user, groups, target, ancestry, func(Permission) bool {
		found = true
		return true
	})
	return found
}

// eachPermission calls fn with every permission the user holds on the target
// (repeats included) until fn returns true: those of every role bound to it
// on the target or an ancestor that the binding may grant there, a wildcard
// kept whole, and those of kind bindings narrowed to their kind.
func (e *Evaluator) eachPermission(user string, groups []string, target Node, ancestry []Edge, fn func(Permission) bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var chain [maxDepth]Node
	n, org := e.ancestry(target, ancestry, &chain)
	stop := false
	for _, node := range chain[:n] {
		e.eachGrant(e.onNode[node], user, groups, org, func(g grant) bool {
			for p := range g.role.permissions() {
				// A wildcard is kept whole: it may stand for kinds granted here.
				if grants(e.grantedAt(p), node) && fn(p) {
					stop = true
					break
				}
			}
			return stop
		})
		if stop {
			return
		}
	}
	for kind, bySubject := range e.onKind {
		e.eachGrant(bySubject, user, groups, org, func(g grant) bool {
			for p := range g.role.permissions() {
				if (p.Group == kind.Group || p.Group == "*") && (p.Resource == kind.Resource || p.Resource == "*") &&
					fn(Permission{Group: kind.Group, Resource: kind.Resource, Verb: p.Verb}) {
					stop = true
					break
				}
			}
			return stop
		})
		if stop {
			return
		}
	}
}

func serviceAccount(user string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok
}
