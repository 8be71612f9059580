// Package catalog is the server's index of the service catalog: which
// Services exist and in which phase, which API resources each one gates and
// in which context, and which projects enabled which Service.
//
// The router asks it, for every request in a tenant context, whether the
// resource is served there (tenancy.ServiceGates), and the all-projects view
// asks it which projects' objects of a resource to show. Every answer is a
// lookup in memory. It is fed by four shared informers — Services, CRDs and
// APIServices of the platform, ServiceActivations of every project
// (metadata only) — with one event handler each: an enablement costs one map entry and the
// informer's slim copy of its metadata, never a goroutine, watch or timer.
package catalog

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	servicesv1alpha1 "go.miloapis.com/milo/pkg/apis/services/v1alpha1"
	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Catalog answers where the resources Services list are served. The zero
// value knows no Service and is not synced; Run feeds it.
type Catalog struct {
	synced atomic.Bool
	// snap is rebuilt whenever a Service or CRD changes: both are few, and
	// requests read it with one atomic load.
	snap atomic.Pointer[snapshot]
	// rebuild serializes snapshot builds.
	rebuild  sync.Mutex
	services cache.Store
	crds     cache.Store
	// apiServices, if set, tell which groups an aggregated server serves.
	apiServices cache.Store

	mu sync.RWMutex
	// enabled holds one entry per ServiceActivation: a project's storage id
	// and the Service's name, and the UID of the Service it was made for:
	// a Service deleted and registered again under its name is enabled
	// nowhere.
	enabled map[enablement]string
	// watches end when what served them goes (Watch): one entry per open
	// watch of a resource a Service lists or may come to list, nothing per
	// project.
	watches map[enablement]map[uint64]openWatch
	// shownSubs are told when a project's enablement of a Service changes
	// (OnShownChange): one per open all-projects watch.
	shownSubs map[uint64]shownSub
	nextID    uint64
	// changedAt is the resource version at which the Service serving a
	// resource last changed (registered, deleted, into or out of Draft or
	// the Project context, the resource passed on), as far as the catalog
	// has seen: a watch of the all-projects view from before it would miss
	// the change. One entry per resource a Service ever listed.
	changedAt map[schema.GroupResource]uint64
	// changes are, per Service, the latest enablements that came into
	// effect or went, with their resource versions: an all-projects watch
	// from a resource version they reach back to replays those after it.
	changes map[string]*changeLog
	// activationRV is the newest resource version seen of activations.
	activationRV uint64
	// floor is the oldest resource version from which the catalog can
	// tell an all-projects watch every change: where it loaded, or where
	// its informer last learned of a deletion only by listing again.
	floor uint64
	// lastSync is the activations informer's last resource version.
	lastSync func() string
}

// openWatch is one open watch: it ends when the enablement it was opened
// under goes, when gr is no longer that Service's (or, opened under none,
// when a Service comes to list it), or when the Service is no longer the
// one it was opened under.
type openWatch struct {
	cancel context.CancelFunc
	gr     schema.GroupResource
	uid    string
}

type shownSub struct {
	gr      schema.GroupResource
	changed func(projectID string)
}

// enablement is a project's (by storage id) enablement of a Service; with
// no project, the all-projects view's serving of the Service's resources.
type enablement struct{ project, service string }

// ServiceUIDAnnotation, on a ServiceActivation, is the UID of the Service
// it enables, written by the server when it is created; only an activation
// of the Service that exists now counts.
const ServiceUIDAnnotation = "services.miloapis.com/service-uid"

// gate is where one resource of a Service is served.
type gate struct {
	service string
	context servicesv1alpha1.Context
	draft   bool
}

// snapshot is what the catalog knows of Services and the platform's CRDs.
type snapshot struct {
	gates map[schema.GroupResource]gate
	// groups are the resources of each group some Service lists a
	// resource of: those of the platform's CRDs and those Services list.
	groups map[string]sets.Set[string]
	// phases and UIDs of every Service, by name.
	phases map[string]servicesv1alpha1.Phase
	uids   map[string]string
	// aggregated are the groups an aggregated server serves, whose
	// resources the catalog does not know all of.
	aggregated sets.Set[string]
}

var empty = &snapshot{gates: map[schema.GroupResource]gate{}, groups: map[string]sets.Set[string]{}, phases: map[string]servicesv1alpha1.Phase{}, uids: map[string]string{},
	aggregated: sets.New[string]()}

func (c *Catalog) current() *snapshot {
	if s := c.snap.Load(); s != nil {
		return s
	}
	return empty
}

var _ tenancy.ServiceGates = &Catalog{}

// Synced reports whether Run has loaded every Service, CRD and activation.
func (c *Catalog) Synced() bool { return c.synced.Load() }

// Served reports whether gr is served to t (tenancy.ServiceGates).
func (c *Catalog) Served(t tenancy.Tenant, gr schema.GroupResource) bool {
	g, ok := c.current().gates[gr]
	if !ok {
		return true
	}
	return c.servedBy(g, t)
}

func (c *Catalog) servedBy(g gate, t tenancy.Tenant) bool {
	switch t.Kind {
	case tenancy.Platform:
		return true
	case tenancy.Project:
		return g.context == servicesv1alpha1.ContextProject && !g.draft && c.Enabled(t.ID, g.service)
	case tenancy.AllProjects:
		return g.context == servicesv1alpha1.ContextProject && !g.draft
	case tenancy.Organization:
		return g.context == servicesv1alpha1.ContextOrganization && !g.draft
	}
	return false
}

// GroupHidden reports whether Services hide every resource of group from t
// (tenancy.ServiceGates).
func (c *Catalog) GroupHidden(t tenancy.Tenant, group string) bool {
	s := c.current()
	resources, ok := s.groups[group]
	if !ok || s.aggregated.Has(group) {
		// An aggregated server's group may serve resources no Service
		// lists: only its resources are hidden, never the group.
		return false
	}
	for r := range resources {
		g, gated := s.gates[schema.GroupResource{Group: group, Resource: r}]
		if !gated || c.servedBy(g, t) {
			return false
		}
	}
	return true
}

// GroupView names which of group's gated resources are served to t
// (tenancy.ServiceGates): "" when Services gate none of them.
func (c *Catalog) GroupView(t tenancy.Tenant, group string) string {
	s := c.current()
	var out []string
	for r := range s.groups[group] {
		if g, gated := s.gates[schema.GroupResource{Group: group, Resource: r}]; gated {
			out = append(out, fmt.Sprintf("%s=%t", r, c.servedBy(g, t)))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// Listed reports whether the Service is in the catalog consumers see.
func (c *Catalog) Listed(name string) bool { return listed(c.current().phases[name]) }

func listed(p servicesv1alpha1.Phase) bool {
	return p == servicesv1alpha1.Published || p == servicesv1alpha1.Deprecated
}

// ListedSelector selects the Services Listed reports, by the label the
// server keeps equal to their phase.
func (c *Catalog) ListedSelector() string {
	return servicesv1alpha1.PhaseLabel + " in (" + string(servicesv1alpha1.Published) + "," + string(servicesv1alpha1.Deprecated) + ")"
}

// Phase returns the phase of the named Service, if it exists.
func (c *Catalog) Phase(name string) (servicesv1alpha1.Phase, bool) {
	p, ok := c.current().phases[name]
	return p, ok
}

// UID returns the UID of the named Service, if it exists.
func (c *Catalog) UID(name string) (string, bool) {
	uid, ok := c.current().uids[name]
	return uid, ok
}

// Owner returns the Service that lists gr, if any.
func (c *Catalog) Owner(gr schema.GroupResource) (string, bool) {
	g, ok := c.current().gates[gr]
	return g.service, ok
}

// Enabled reports whether the project with storage id project enabled
// service, as it exists now.
func (c *Catalog) Enabled(project, service string) bool {
	c.mu.RLock()
	uid, ok := c.enabled[enablement{project, service}]
	c.mu.RUnlock()
	return ok && uid != "" && uid == c.current().uids[service]
}

// Watch returns a context that ends when the project with storage id
// project stops having gr's Service enabled, for a watch of gr served
// there, and a function to call when the watch ends. With no project (the
// all-projects view), the context ends when gr stops being served there:
// its Service deleted, registered again or back in Draft, or gr passed to
// another Service. A watch of a resource no Service lists ends when one
// comes to.
func (c *Catalog) Watch(ctx context.Context, project string, gr schema.GroupResource) (context.Context, func()) {
	s := c.current()
	g, ok := s.gates[gr]
	if !ok && Reserved(gr.Group) {
		return ctx, func() {} // never a Service's
	}
	// A resource no Service lists yet: the watch ends if one comes to.
	ctx, cancel := context.WithCancel(ctx)
	e := enablement{project, g.service}
	w := openWatch{cancel: cancel, gr: gr, uid: s.uids[g.service]}
	c.mu.Lock()
	if c.watches == nil {
		c.watches = map[enablement]map[uint64]openWatch{}
	}
	c.nextID++
	id := c.nextID
	if c.watches[e] == nil {
		c.watches[e] = map[uint64]openWatch{}
	}
	c.watches[e][id] = w
	if !c.keepsLocked(e, w, c.current()) {
		// Disabled between the router's check and now.
		cancel()
	}
	c.mu.Unlock()
	return ctx, func() {
		cancel()
		c.mu.Lock()
		delete(c.watches[e], id)
		if len(c.watches[e]) == 0 {
			delete(c.watches, e)
		}
		c.mu.Unlock()
	}
}

// OnShownChange calls changed, under the catalog's lock, with a project's
// storage id whenever the project's enablement of the Service that lists gr
// comes into effect or goes, until the function it returns is called
// (tenantstorage.Shown); with changed nil, it only checks since. From since
// (when not 0), it first calls changed
// for every project whose enablement changed after since; fresh is false
// when that cannot be told (the Service changed after since, or so many
// enablements did that the catalog no longer holds them all).
func (c *Catalog) OnShownChange(gr schema.GroupResource, since uint64, changed func(projectID string)) (func(), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if since > 0 {
		// A resource no Service ever listed has nothing to tell.
		g, gated := c.current().gates[gr]
		if c.changedAt[gr] > since || (gated && since < c.floor) {
			return func() {}, false
		}
		if gated && !c.changes[g.service].after(since, changed) {
			return func() {}, false
		}
	}
	if changed == nil {
		return func() {}, true
	}
	if c.shownSubs == nil {
		c.shownSubs = map[uint64]shownSub{}
	}
	c.nextID++
	id := c.nextID
	c.shownSubs[id] = shownSub{gr: gr, changed: changed}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.shownSubs, id)
	}, true
}

// changeLogSize bounds the enablement changes kept per Service: a watch
// from a resource version before the oldest of them lists again. At 1,000
// changes a second it reaches back 4 s, far beyond an informer's list and
// watch.
const changeLogSize = 4096

// changeLog holds a Service's latest enablement changes.
type changeLog struct {
	entries []change
	next    int
	// floor is the newest resource version of a change no longer held:
	// the log holds every change after it.
	floor uint64
}

type change struct {
	rv      uint64
	project string
}

func (l *changeLog) add(c change) {
	if len(l.entries) < changeLogSize {
		l.entries = append(l.entries, c)
		return
	}
	l.floor = max(l.floor, l.entries[l.next].rv)
	l.entries[l.next] = c
	l.next = (l.next + 1) % changeLogSize
}

// after calls each with the project of every change after rv; false when
// the log no longer holds them all. A nil log holds no change.
func (l *changeLog) after(rv uint64, each func(string)) bool {
	if l == nil {
		return true
	}
	if rv < l.floor {
		return false
	}
	for _, c := range l.entries {
		if c.rv > rv {
			each(c.project)
		}
	}
	return true
}

// Enablements returns how many enablements the catalog holds.
func (c *Catalog) Enablements() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.enabled)
}

// ProjectsShown returns which projects' objects of gr the all-projects view
// shows: those that enabled the Service that lists gr; nil when gr is not a
// project resource of any Service and every project's objects are shown.
func (c *Catalog) ProjectsShown(gr schema.GroupResource) func(projectID string) bool {
	g, ok := c.current().gates[gr]
	if !ok {
		return nil
	}
	if g.context != servicesv1alpha1.ContextProject {
		return func(string) bool { return false }
	}
	return func(projectID string) bool { return c.Enabled(projectID, g.service) }
}

// Run feeds the catalog from the informers of Services (whole objects, of
// the platform), of the platform's CRDs and of ServiceActivations (over the
// all-projects view, qualified: package allprojects), until ctx ends. It
// returns once they have synced, false if ctx ended first. The informers
// must have been started, or be started by the caller.
func (c *Catalog) Run(ctx context.Context, services, crds, apiServices, activations cache.SharedIndexInformer) bool {
	c.services, c.crds, c.apiServices = services.GetStore(), crds.GetStore(), apiServices.GetStore()
	rebuild := func(service bool) cache.ResourceEventHandlerFuncs {
		changed := func(old, obj any) {
			if service {
				c.serviceChanged(old, obj)
			}
			c.build()
		}
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { changed(nil, obj) },
			UpdateFunc: changed,
			DeleteFunc: func(obj any) { changed(obj, obj) },
		}
	}
	regs := []cache.ResourceEventHandlerRegistration{}
	for i, inf := range []cache.SharedIndexInformer{services, crds, apiServices} {
		reg, err := inf.AddEventHandler(rebuild(i == 0))
		if err != nil {
			return false
		}
		regs = append(regs, reg)
	}
	reg, err := activations.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.activation(obj, true) },
		UpdateFunc: func(_, obj any) { c.activation(obj, true) },
		DeleteFunc: func(obj any) { c.activation(obj, false) },
	})
	if err != nil {
		return false
	}
	regs = append(regs, reg)
	synced := []cache.InformerSynced{}
	for _, r := range regs {
		synced = append(synced, r.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return false
	}
	c.build()
	// What changed before the catalog had loaded is not known: a watch
	// from before then lists again.
	c.mu.Lock()
	c.lastSync = activations.LastSyncResourceVersion
	c.floor = max(c.floor, parseRV(c.lastSync()))
	c.mu.Unlock()
	c.synced.Store(true)
	return true
}

func parseRV(v string) uint64 {
	rv, _ := strconv.ParseUint(v, 10, 64)
	return rv
}

// servesLocked reports whether the enablement e is in effect with the
// Services of s; the caller holds c.mu. The all-projects view's (no
// project) is in effect while its Service exists and is out of Draft.
func (c *Catalog) servesLocked(e enablement, s *snapshot) bool {
	if _, exists := s.uids[e.service]; !exists || s.phases[e.service] == servicesv1alpha1.Draft {
		return false
	}
	if e.project == "" {
		return true
	}
	uid, ok := c.enabled[e]
	return ok && uid != "" && uid == s.uids[e.service]
}

// keepsLocked reports whether the open watch w, opened under e, may go on
// with the Services of s: its resource still the same Service's, served in
// projects, out of Draft, and (for a project's) still enabled there; the
// caller holds c.mu.
func (c *Catalog) keepsLocked(e enablement, w openWatch, s *snapshot) bool {
	g, ok := s.gates[w.gr]
	if e.service == "" {
		return !ok
	}
	return ok && g.service == e.service && g.context == servicesv1alpha1.ContextProject && !g.draft &&
		s.uids[e.service] == w.uid && c.servesLocked(e, s)
}

// endWatches ends the watches no longer served with the Services of s: a
// Service deleted, registered again or back in Draft, a resource passed to
// another Service.
func (c *Catalog) endWatches(s *snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e, open := range c.watches {
		for _, w := range open {
			if !c.keepsLocked(e, w, s) {
				w.cancel()
			}
		}
	}
}

// activation records or forgets one project's enablement of a Service. An
// activation being deleted no longer enables anything, whatever finalizers
// keep it.
func (c *Catalog) activation(obj any, present bool) {
	k, ok := allprojects.KeyOf(obj, true)
	if !ok || k.ID == "" {
		return // a platform object: enables nothing
	}
	d := obj
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if m.GetDeletionTimestamp() != nil {
		present = false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.enabled == nil {
		c.enabled = map[enablement]string{}
	}
	// The name is the Service's (validated at creation).
	e := enablement{project: k.ID, service: k.Name}
	was, had := c.enabled[e]
	uid := ""
	if present {
		uid = m.GetAnnotations()[ServiceUIDAnnotation]
		if had && uid == was {
			return
		}
		e.service = strings.Clone(e.service)
		c.enabled[e] = strings.Clone(uid)
	} else {
		if !had {
			return
		}
		delete(c.enabled, e)
	}
	rv := parseRV(m.GetResourceVersion())
	if _, unknown := d.(cache.DeletedFinalStateUnknown); unknown || rv == 0 {
		// When it went is not known, only that it was before the list
		// that found it gone: no watch from before that can be told.
		rv = c.activationRV
		if c.lastSync != nil {
			rv = max(rv, parseRV(c.lastSync()))
		}
		c.floor = max(c.floor, rv)
	}
	c.activationRV = max(c.activationRV, rv)
	current := c.current().uids[e.service]
	if effective := func(present bool, uid string) bool { return present && uid != "" && uid == current }; effective(had, was) != effective(present, uid) {
		c.shownChangedLocked(e, rv)
	}
	if present {
		return
	}
	// Watches served by this enablement end: their clients list again
	// and find the resource gone.
	for _, w := range c.watches[e] {
		w.cancel()
	}
	delete(c.watches, e)
}

// shownChangedLocked records that the project's enablement of the Service
// came into effect or went at resource version rv, and tells the
// all-projects view's watches of the Service's resources; the caller holds
// c.mu.
func (c *Catalog) shownChangedLocked(e enablement, rv uint64) {
	s := c.current()
	if c.changes == nil {
		c.changes = map[string]*changeLog{}
	}
	if c.changes[e.service] == nil {
		c.changes[e.service] = &changeLog{}
	}
	c.changes[e.service].add(change{rv: rv, project: e.project})
	for _, sub := range c.shownSubs {
		if s.gates[sub.gr].service == e.service {
			sub.changed(e.project)
		}
	}
}

func (c *Catalog) markChangedLocked(gr schema.GroupResource, rv uint64) {
	if c.changedAt == nil {
		c.changedAt = map[schema.GroupResource]uint64{}
	}
	c.changedAt[gr] = max(c.changedAt[gr], rv)
}

// serviceChanged records, at the resource version of a Service's event,
// that what the all-projects view shows of the resources it lists (before
// and after) changed, when its registration, phase or resources did. It
// runs before the snapshot with the change is built, so no watch sees the
// new gates with the old record.
func (c *Catalog) serviceChanged(old, obj any) {
	rvOf := func(o any) uint64 {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if m, ok := o.(metav1.Object); ok {
			return parseRV(m.GetResourceVersion())
		}
		return 0
	}
	svcOf := func(o any) *servicesv1alpha1.Service {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if s, ok := toService(o); ok {
			return s
		}
		return &servicesv1alpha1.Service{}
	}
	rv := rvOf(obj)
	before, after := svcOf(old), svcOf(obj)
	draft := func(s *servicesv1alpha1.Service) bool {
		return s.Spec.Phase == "" || s.Spec.Phase == servicesv1alpha1.Draft
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old != nil && obj != nil && old != obj && before.UID == after.UID && draft(before) == draft(after) && slices.Equal(before.Spec.Resources, after.Spec.Resources) {
		return
	}
	for _, s := range []*servicesv1alpha1.Service{before, after} {
		for _, r := range s.Spec.Resources {
			c.markChangedLocked(schema.GroupResource{Group: r.Group, Resource: r.Resource}, rv)
		}
	}
}

// SlimActivation is the transform of the informer of ServiceActivations
// (after allprojects.Qualify): it keeps what identifies one, whether it is
// being deleted, and the UID of the Service it was made for.
func SlimActivation(obj any) (any, error) {
	obj, err := allprojects.Qualify(obj)
	if err != nil {
		return obj, err
	}
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		uid := m.Annotations[ServiceUIDAnnotation]
		m.TypeMeta = metav1.TypeMeta{}
		allprojects.Slim(&m.ObjectMeta)
		if uid != "" {
			m.Annotations = map[string]string{ServiceUIDAnnotation: uid}
		}
	}
	return obj, nil
}

// build makes a new snapshot from the stores.
func (c *Catalog) build() {
	c.rebuild.Lock()
	defer c.rebuild.Unlock()
	if c.services == nil || c.crds == nil {
		return
	}
	s := &snapshot{gates: map[schema.GroupResource]gate{}, groups: map[string]sets.Set[string]{}, phases: map[string]servicesv1alpha1.Phase{}, uids: map[string]string{},
		aggregated: sets.New[string]()}
	var services []*servicesv1alpha1.Service
	for _, obj := range c.services.List() {
		if svc, ok := toService(obj); ok {
			services = append(services, svc)
		}
	}
	// Oldest first: a resource two Services list (admission refuses the
	// second, but a race can store both) stays the first one's.
	sort.Slice(services, func(i, j int) bool {
		a, b := services[i], services[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	for _, svc := range services {
		s.uids[svc.Name] = string(svc.UID)
		phase := svc.Spec.Phase
		if phase == "" {
			phase = servicesv1alpha1.Draft
		}
		s.phases[svc.Name] = phase
		for _, r := range svc.Spec.Resources {
			gr := schema.GroupResource{Group: r.Group, Resource: r.Resource}
			if _, taken := s.gates[gr]; taken {
				continue
			}
			ctx := r.Context
			if ctx == "" {
				ctx = servicesv1alpha1.ContextProject
			}
			s.gates[gr] = gate{service: svc.Name, context: ctx, draft: phase == servicesv1alpha1.Draft}
			if s.groups[r.Group] == nil {
				s.groups[r.Group] = sets.New[string]()
			}
			s.groups[r.Group].Insert(r.Resource)
		}
	}
	if c.apiServices != nil {
		for _, obj := range c.apiServices.List() {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
			if svc, found, _ := unstructured.NestedMap(u.Object, "spec", "service"); found && svc != nil {
				s.aggregated.Insert(group)
			}
		}
	}
	for _, obj := range c.crds.List() {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			continue
		}
		if rs, ok := s.groups[crd.Spec.Group]; ok {
			rs.Insert(crd.Spec.Names.Plural)
		}
	}
	c.snap.Store(s)
	c.endWatches(s)
}

// toService converts an informer's object to a Service.
func toService(obj any) (*servicesv1alpha1.Service, bool) {
	switch o := obj.(type) {
	case *servicesv1alpha1.Service:
		return o, true
	case *unstructured.Unstructured:
		svc := &servicesv1alpha1.Service{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, svc); err != nil {
			return nil, false
		}
		return svc, true
	}
	return nil, false
}
