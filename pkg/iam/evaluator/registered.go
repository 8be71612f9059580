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
	verbs  atomic.Pointer[map[string][]string]
	synced atomic.Bool
}

// Registration is what one ProtectedResource registers.
type Registration struct {
	// Group is the kind's API group, "core" for the core group.
	Group, Plural string
	Verbs         []string
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
	for _, reg := range r.byName {
		key := reg.Group + "/" + reg.Plural
		verbs[key] = append(verbs[key], reg.Verbs...)
	}
	r.verbs.Store(&verbs)
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
		group := p.Group
		if group == "" {
			group = "core"
		}
		resource, _, _ := strings.Cut(p.Resource, "/")
		known, registered := verbs(group, resource)
		if !registered || (p.Verb != "*" && !slices.Contains(known, p.Verb) && !slices.Contains(known, "*")) {
			out = append(out, s)
		}
	}
	return out
}
