// Package catalog is the server's index of the service catalog: which
// Services exist and in which phase, which API resources each one gates and
// in which context, and which projects enabled which Service.
//
// The router asks it, for every request in a tenant context, whether the
// resource is served there (tenancy.ServiceGates), and the all-projects view
// asks it which projects' objects of a resource to show. Every answer is a
// lookup in memory. It is fed by three shared informers — Services and CRDs
// of the platform, ServiceActivations of every project (metadata only) —
// with one event handler each: an enablement costs one map entry and the
// informer's slim copy of its metadata, never a goroutine, watch or timer.
package catalog

import (
	"context"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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

	mu sync.RWMutex
	// enabled holds one entry per ServiceActivation: a project's storage id
	// and the Service's name.
	enabled map[enablement]struct{}
}

type enablement struct{ project, service string }

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
	// phases of every Service, by name.
	phases map[string]servicesv1alpha1.Phase
}

var empty = &snapshot{gates: map[schema.GroupResource]gate{}, groups: map[string]sets.Set[string]{}, phases: map[string]servicesv1alpha1.Phase{}}

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
		return g.context == servicesv1alpha1.ContextProject && c.Enabled(t.ID, g.service)
	case tenancy.AllProjects:
		return g.context == servicesv1alpha1.ContextProject
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
	if !ok {
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

// Owner returns the Service that lists gr, if any.
func (c *Catalog) Owner(gr schema.GroupResource) (string, bool) {
	g, ok := c.current().gates[gr]
	return g.service, ok
}

// Enabled reports whether the project with storage id project enabled service.
func (c *Catalog) Enabled(project, service string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.enabled[enablement{project, service}]
	return ok
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
func (c *Catalog) Run(ctx context.Context, services, crds, activations cache.SharedIndexInformer) bool {
	c.services, c.crds = services.GetStore(), crds.GetStore()
	rebuild := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.build() },
		UpdateFunc: func(_, _ any) { c.build() },
		DeleteFunc: func(any) { c.build() },
	}
	regs := []cache.ResourceEventHandlerRegistration{}
	for _, inf := range []cache.SharedIndexInformer{services, crds} {
		reg, err := inf.AddEventHandler(rebuild)
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
	c.synced.Store(true)
	return true
}

// activation records or forgets one project's enablement of a Service.
func (c *Catalog) activation(obj any, present bool) {
	k, ok := allprojects.KeyOf(obj, true)
	if !ok || k.ID == "" {
		return // a platform object: enables nothing
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.enabled == nil {
		c.enabled = map[enablement]struct{}{}
	}
	// The name is the Service's (validated at creation).
	e := enablement{project: k.ID, service: strings.Clone(k.Name)}
	if present {
		c.enabled[e] = struct{}{}
	} else {
		delete(c.enabled, e)
	}
}

// build makes a new snapshot from the stores.
func (c *Catalog) build() {
	c.rebuild.Lock()
	defer c.rebuild.Unlock()
	if c.services == nil || c.crds == nil {
		return
	}
	s := &snapshot{gates: map[schema.GroupResource]gate{}, groups: map[string]sets.Set[string]{}, phases: map[string]servicesv1alpha1.Phase{}}
	services := c.services.List()
	// In name order: a resource two Services list (admission refuses the
	// second, but a race can store both) is the first one's.
	sort.Slice(services, func(i, j int) bool { return nameOf(services[i]) < nameOf(services[j]) })
	for _, obj := range services {
		svc, ok := toService(obj)
		if !ok {
			continue
		}
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
}

func nameOf(obj any) string {
	if m, ok := obj.(interface{ GetName() string }); ok {
		return m.GetName()
	}
	return ""
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
