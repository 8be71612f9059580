package evaluator

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Registered holds the permissions ProtectedResources register: for each
// kind (its group, "core" for the core group, and plural), the verbs that
// may be granted on it. Roles may grant only those (package iamadmission).
type Registered struct {
	mu     sync.Mutex
	byName map[string]Registration
	// verbs is derived from byName on every change: ProtectedResources are
	// few and change rarely, and admission reads it with one atomic load.
	verbs atomic.Pointer[map[string][]string]
	// levels is derived with verbs: for each kind registered with parents,
	// the levels of the hierarchy whose bindings grant it (GrantedAt).
	levels atomic.Pointer[map[kindKey]Levels]
	synced atomic.Bool
}

// Registration is what one ProtectedResource registers.
type Registration struct {
	// Group is the kind's API group, "core" for the core group.
	Group, Plural string
	Verbs         []string
	// Kind is the kind's name, and Parents the kinds it lives under: the
	// hierarchy's (Organization, Folder, Project) or other registered kinds,
	// whose own parents are followed.
	Kind    string
	Parents []KindRef
}

// KindRef names a kind by its API group ("core" for the core group) and name.
type KindRef struct{ Group, Kind string }

// Levels is a set of levels of the hierarchy at which a binding may grant a kind.
type Levels uint8

const (
	// AtOrganization is a binding on the organization.
	AtOrganization Levels = 1 << iota
	// AtFolder is a binding on a folder.
	AtFolder
	// AtProject is a binding on a project.
	AtProject
	// AnyLevel is every level: a kind registered without parents, or not at all.
	AnyLevel = AtOrganization | AtFolder | AtProject
)

// kindKey names a registered kind by group ("core" for the core group) and
// plural, without building a string per decision.
type kindKey struct{ group, plural string }

// levelsUnder returns, for a hierarchy kind, the levels at or above it:
// fixed, whatever its own ProtectedResource says, so that editing that
// registration cannot cut organizations and folders off from what projects
// hold. ok is false for any other kind.
func levelsUnder(k KindRef) (at Levels, ok bool) {
	if k.Group != ResourceManagerGroup {
		return 0, false
	}
	switch k.Kind {
	case "Organization":
		return AtOrganization, true
	case "Folder":
		return AtOrganization | AtFolder, true
	case "Project":
		return AnyLevel, true
	}
	return 0, false
}

// levelOfNode is the level of a node of the hierarchy, 0 for an object.
func levelOfNode(n Node) Levels {
	if n.Group != ResourceManagerGroup {
		return 0
	}
	switch n.Resource {
	case "organizations":
		return AtOrganization
	case "folders":
		return AtFolder
	case "projects":
		return AtProject
	}
	return 0
}

// Set records (or replaces) the registration of the named ProtectedResource.
func (r *Registered) Set(name string, reg Registration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byName == nil {
		r.byName = map[string]Registration{}
	}
	r.byName[name] = reg
	r.derive()
}

// Delete forgets the named ProtectedResource.
func (r *Registered) Delete(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byName, name)
	r.derive()
}

// MarkSynced records that every ProtectedResource stored has been Set.
func (r *Registered) MarkSynced() { r.synced.Store(true) }

// Synced reports whether MarkSynced was called.
func (r *Registered) Synced() bool { return r.synced.Load() }

func (r *Registered) derive() {
	verbs := map[string][]string{}
	byKind := map[KindRef][]Registration{}
	for _, reg := range r.byName {
		key := reg.Group + "/" + reg.Plural
		verbs[key] = append(verbs[key], reg.Verbs...)
		if reg.Kind != "" {
			k := KindRef{Group: reg.Group, Kind: reg.Kind}
			byKind[k] = append(byKind[k], reg)
		}
	}
	r.verbs.Store(&verbs)
	// A kind is granted at the levels its parents are, or lie under: a
	// kind under Project is granted by bindings on the project and on what
	// the project lies under (Folder, Organization). A hierarchy kind is
	// also granted at its own level (a binding on a project grants reading
	// it). Kinds registered without parents, and kinds some registration
	// lists without parents, are granted at every level, as are kinds whose
	// parents reach no level (a parent nobody registers): a mistake in a
	// ProtectedResource does not lock everyone out of its kind.
	levels := map[kindKey]Levels{}
	unrestricted := map[kindKey]bool{}
	for _, reg := range r.byName {
		key := kindKey{reg.Group, reg.Plural}
		if at, hierarchy := levelsUnder(KindRef{Group: reg.Group, Kind: reg.Kind}); hierarchy {
			levels[key] |= at
			continue
		}
		at := grantedUnder(reg, byKind, map[KindRef]bool{})
		if at == AnyLevel {
			unrestricted[key] = true
			continue
		}
		levels[key] |= at
	}
	for key := range unrestricted {
		delete(levels, key)
	}
	r.levels.Store(&levels)
}

// grantedUnder returns the levels at which a binding grants the kind reg
// registers: those its parents are granted at, AnyLevel if it has no
// parents or they reach no level. seen guards against cycles.
func grantedUnder(reg Registration, byKind map[KindRef][]Registration, seen map[KindRef]bool) Levels {
	var at Levels
	for _, p := range reg.Parents {
		at |= parentLevels(p, byKind, seen)
	}
	if at == 0 {
		return AnyLevel
	}
	return at
}

// parentLevels returns the levels a kind under parent k is granted at: a
// hierarchy kind's fixed levels; for another kind, the levels it is granted
// at itself, AnyLevel if a registration of it is unrestricted, nothing if
// nobody registers it (or it is already being followed: a cycle).
func parentLevels(k KindRef, byKind map[KindRef][]Registration, seen map[KindRef]bool) Levels {
	if at, hierarchy := levelsUnder(k); hierarchy {
		return at
	}
	if seen[k] {
		return 0
	}
	seen[k] = true
	var at Levels
	for _, reg := range byKind[k] {
		at |= grantedUnder(reg, byKind, seen)
	}
	return at
}

// GrantedAt returns the levels of the hierarchy at which a binding grants
// permissions on group ("core" for the core group) and plural, as its
// ProtectedResources' parentResources say; AnyLevel for a kind registered
// without parents or not registered.
func (r *Registered) GrantedAt(group, plural string) Levels {
	m := r.levels.Load()
	if m == nil {
		return AnyLevel
	}
	if at, ok := (*m)[kindKey{group, plural}]; ok {
		return at
	}
	return AnyLevel
}

// Verbs returns the verbs registered for group ("core" for the core group)
// and plural, and whether anything registers the kind.
func (r *Registered) Verbs(group, plural string) ([]string, bool) {
	m := r.verbs.Load()
	if m == nil {
		return nil, false
	}
	v, ok := (*m)[group+"/"+plural]
	return v, ok
}

// Unregistered returns the permissions of perms that name a kind or a verb
// verbs does not register. Wildcards match whatever they stand for; a
// subresource counts as its kind.
func Unregistered(perms []string, verbs func(group, plural string) ([]string, bool)) []string {
	var out []string
	for _, s := range perms {
		p, ok := ParsePermission(s)
		if !ok || p.Group == "*" || p.Resource == "*" {
			continue
		}
		group, resource := kindOf(p)
		known, registered := verbs(group, resource)
		if !registered || (p.Verb != "*" && !slices.Contains(known, p.Verb) && !slices.Contains(known, "*")) {
			out = append(out, s)
		}
	}
	return out
}

// kindOf names the kind of a permission as registrations do: its group
// ("core" for the core group) and plural (a subresource counts as its kind).
func kindOf(p Permission) (group, plural string) {
	group = p.Group
	if group == "" {
		group = "core"
	}
	plural, _, _ = strings.Cut(p.Resource, "/")
	return group, plural
}
