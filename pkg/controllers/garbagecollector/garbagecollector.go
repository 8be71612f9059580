// Package garbagecollector deletes the dependents of deleted owners, in
// every project and on the platform, with Kubernetes' semantics: background
// deletion (dependents go once every owner is gone), foreground deletion (an
// owner with the foregroundDeletion finalizer waits until its dependents that
// block it are gone), orphaning (an owner with the orphan finalizer leaves
// its dependents, minus their reference to it), dangling references (an owner
// that does not exist, or exists with another UID) and invalid ones (a
// cluster-scoped dependent naming a namespaced owner) count as absent owners,
// and a dependent with an owner still present only loses its references to
// the absent ones.
//
// An owner reference is resolved only inside the dependent's own project: the
// owner is looked up, by name and then UID, with a client of that project, so
// a reference naming another project's object never keeps anything alive and
// never deletes anything of that project.
//
// Upstream's collector keeps a graph of every object of the cluster; Milo's
// keeps only the objects that have owners or wait for dependents (graph.go),
// keyed by project, and learns of the rest only as they go: one watch per
// resource for every project (the all-projects view) and one for the
// platform, read into that graph, and no informer cache of every object.
// Decisions always read the objects concerned again from the API first.
package garbagecollector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/manager"
)

// Name is the controller's name in the registry of controllers.
const Name = "garbage-collector"

// maxAbsent bounds each generation of the deleted objects the collector
// remembers.
const maxAbsent = 1 << 16

// ignored are resources the collector does not watch, as upstream's
// ignores events: quota claims, one stored with every charged object (a
// watch of them would decode each once more), are the server's, made
// without owners, and removed by the quota controller once their object is
// gone. An owner reference set on one by hand is not followed.
var ignored = sets.New(schema.GroupResource{Group: "quota.miloapis.com", Resource: "resourceclaims"})

// maxOwners bounds the owner references resolved for one dependent (each is
// a read): a dependent with more is left alone and reported.
const maxOwners = 256

// Controller collects garbage.
type Controller struct {
	clients            *allprojects.Clients
	platform, projects allprojects.ResourceLists
}

// New prepares the controller.
func New(clients *allprojects.Clients) *Controller { return &Controller{clients: clients} }

type op int

const (
	// verify looks at a dependent's owners and deletes it, or drops
	// references, as they say.
	verify op = iota
	// finalize works for an owner being deleted with foregroundDeletion or orphan.
	finalize
)

// item is one unit of work.
type item struct {
	op       op
	resource schema.GroupVersionResource
	key      allprojects.Key
}

// TenantKeys returns the project of the item's object, for traces and logs.
func (i item) TenantKeys() (project, organization string) { return i.key.TenantKeys() }

// String renders the item for traces and logs.
func (i item) String() string { return i.resource.Resource + " " + i.key.String() }

// kinds maps the kinds a view serves to their resources.
type kinds map[schema.GroupKind]resourceInfo

type resourceInfo struct {
	gvr        schema.GroupVersionResource
	namespaced bool
	// kinds are the kinds its objects have (one); nil for a resource
	// projects define, where each project names its kind.
	kinds []string
}

type term struct {
	*Controller
	// crds are every project's own CRDs (allprojects.ProjectCRDs): the
	// kinds each project defines itself.
	crds  cache.SharedIndexInformer
	graph *graph
	// absent are objects of projects' own kinds seen deleted, in two
	// generations of at most maxAbsent each (so at least the last
	// maxAbsent are known): an owner among them is gone even when its kind
	// can no longer be read — a project's CRD deleted with its objects.
	absentMu          sync.Mutex
	absent, absentOld map[ownerKey]struct{}
	queue             workqueue.TypedRateLimitingInterface[item]
	mu                sync.Mutex
	// kinds of the platform (0) and of projects (1)
	kinds [2]kinds
}

// Run works until ctx ends.
func (ctl *Controller) Run(ctx context.Context, workers int) {
	crds, err := ctl.clients.ProjectCRDs(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Preparing informer", "controller", Name)
		return
	}
	t := &term{Controller: ctl, crds: crds, graph: newGraph(), absent: map[ownerKey]struct{}{}, queue: manager.NewTenantQueue[item](Name)}
	defer t.queue.ShutDown()
	go t.watchResources(ctx)
	manager.Work(ctx, Name, t.queue, workers, t.sync)
}

// watchResources starts one watch per deletable resource and view, and
// follows discovery as resources (custom resources) come and go; and one
// watch per resource that projects define themselves (projectResources).
func (t *term) watchResources(ctx context.Context) {
	type watchKey struct {
		view int
		gvr  schema.GroupVersionResource
	}
	running := map[watchKey]context.CancelFunc{}
	start := func(k watchKey, info resourceInfo) {
		if _, ok := running[k]; ok {
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		running[k] = cancel
		go t.watch(wctx, info, k.view != 0)
	}
	discover := func() {
		for view := range 2 {
			lists := &t.platform
			cfg := t.clients.Config("")
			if view == 1 {
				lists, cfg = &t.projects, t.clients.AllProjectsConfig()
			}
			resources, err := lists.Get(func() (discovery.DiscoveryInterface, error) {
				return discovery.NewDiscoveryClientForConfigAndClient(cfg, t.clients.HTTPClient())
			})
			if len(resources) == 0 {
				klog.FromContext(ctx).Error(err, "Discovering resources", "controller", Name)
				continue
			}
			found := kinds{}
			for _, l := range resources {
				gv, err := schema.ParseGroupVersion(l.GroupVersion)
				if err != nil {
					continue
				}
				for _, r := range l.APIResources {
					if slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") && slices.Contains(r.Verbs, "delete") && !strings.Contains(r.Name, "/") &&
						!ignored.Has(gv.WithResource(r.Name).GroupResource()) {
						found[gv.WithKind(r.Kind).GroupKind()] = resourceInfo{gv.WithResource(r.Name), r.Namespaced, []string{r.Kind}}
					}
				}
			}
			t.mu.Lock()
			t.kinds[view] = found
			t.mu.Unlock()
			for _, info := range found {
				start(watchKey{view, info.gvr}, info)
			}
		}
	}
	// Projects' own resources, each read through the all-projects view's
	// metadata of it, whatever schema each project gave it: they change
	// only with projects' CRDs, so only those events read them again.
	followProjects := func() {
		watching := map[schema.GroupResource]string{}
		for k := range running {
			if k.view == 2 {
				watching[k.gvr.GroupResource()] = k.gvr.Version
			}
		}
		wanted := t.projectResources(watching)
		for k, cancel := range running {
			if k.view == 2 && !wanted.Has(k.gvr) {
				cancel()
				delete(running, k)
				t.graph.replace(k.gvr, false, nil)
			}
		}
		for gvr := range wanted {
			// Kinds nil: a project resource's are read as it is listed.
			start(watchKey{2, gvr}, resourceInfo{gvr: gvr, namespaced: true})
		}
	}
	// A platform CRD created, established or removed is followed within
	// seconds (its discovery settles a moment after the event); the ticker
	// catches anything else (an aggregated API). A project's CRD is followed
	// when the resource it names or its versions change, without discovery.
	platformChanged, projectsChanged := make(chan struct{}, 1), make(chan struct{}, 1)
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	platformHandler := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { signal(platformChanged) },
		UpdateFunc: func(any, any) { signal(platformChanged) }, DeleteFunc: func(any) { signal(platformChanged) }}
	if crds, err := t.clients.MetadataInformer(ctx, apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"), false, nil); err == nil {
		if _, err := crds.AddEventHandler(platformHandler); err == nil {
			go crds.Run(ctx.Done())
		}
	}
	projectsHandler := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { signal(projectsChanged) },
		UpdateFunc: func(old, new any) {
			if servesOtherwise(old, new) {
				signal(projectsChanged)
			}
		},
		DeleteFunc: func(any) { signal(projectsChanged) }}
	if !manager.StartInformers(ctx, Name, projectsHandler, t.crds) {
		return
	}
	discover()
	followProjects()
	ticker := time.NewTicker(30 * time.Second)
	defer ticker.Stop()
	settle, settleProjects := time.NewTimer(time.Hour), time.NewTimer(time.Hour)
	settle.Stop()
	settleProjects.Stop()
	projectsPending := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			discover()
		case <-platformChanged:
			settle.Reset(2 * time.Second)
		case <-settle.C:
			t.platform.Invalidate()
			t.projects.Invalidate()
			discover()
		case <-projectsChanged:
			// Every project's CRDs are read at once: at most once a
			// second, however long a burst of them goes on.
			if !projectsPending {
				projectsPending = true
				settleProjects.Reset(time.Second)
			}
		case <-settleProjects.C:
			projectsPending = false
			followProjects()
		}
	}
}

// servesOtherwise reports whether a project's CRD changed what the collector
// watches of it: the resource its names hold, or its versions.
func servesOtherwise(old, new any) bool {
	a, ok1 := old.(*apiextensionsv1.CustomResourceDefinition)
	b, ok2 := new.(*apiextensionsv1.CustomResourceDefinition)
	if !ok1 || !ok2 {
		return true
	}
	return a.Status.AcceptedNames.Plural != b.Status.AcceptedNames.Plural || a.Spec.Group != b.Spec.Group ||
		!slices.EqualFunc(a.Spec.Versions, b.Spec.Versions, func(x, y apiextensionsv1.CustomResourceDefinitionVersion) bool { return x.Name == y.Name })
}

// projectResources returns the resources projects' own CRDs have an
// accepted plural for, each at a version some CRD of it has: the one in
// watching while any still has it, else the first by name. The all-projects
// view serves a project-defined resource at every version any project's CRD
// of it has, so a watch moves to another version only when the last CRD
// having its version does.
func (t *term) projectResources(watching map[schema.GroupResource]string) sets.Set[schema.GroupVersionResource] {
	versions := map[schema.GroupResource]sets.Set[string]{}
	for _, o := range t.crds.GetStore().List() {
		crd, ok := o.(*apiextensionsv1.CustomResourceDefinition)
		if !ok || crd.Status.AcceptedNames.Plural == "" {
			continue
		}
		gr := schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Status.AcceptedNames.Plural}
		if versions[gr] == nil {
			versions[gr] = sets.New[string]()
		}
		for _, v := range crd.Spec.Versions {
			versions[gr].Insert(v.Name)
		}
	}
	out := sets.New[schema.GroupVersionResource]()
	for gr, vs := range versions {
		if v, ok := watching[gr]; ok && vs.Has(v) {
			out.Insert(gr.WithVersion(v))
		} else if vs.Len() > 0 {
			out.Insert(gr.WithVersion(sets.List(vs)[0]))
		}
	}
	return out
}

// projectKindsOf returns the kinds projects gave a resource they define.
func (t *term) projectKindsOf(gr schema.GroupResource) []string {
	objs, _ := t.crds.GetIndexer().ByIndex(allprojects.ByGroup, gr.Group)
	kinds := sets.New[string]()
	for _, o := range objs {
		if crd, ok := o.(*apiextensionsv1.CustomResourceDefinition); ok && crd.Status.AcceptedNames.Plural == gr.Resource {
			kinds.Insert(crd.Status.AcceptedNames.Kind)
		}
	}
	return sets.List(kinds)
}

// projectKind returns the resource of a kind the project (storage id)
// defines itself, at the version its CRD serves it.
func (t *term) projectKind(projectID string, gk schema.GroupKind) (resourceInfo, bool) {
	objs, _ := t.crds.GetIndexer().ByIndex(allprojects.ByProject, projectID)
	for _, o := range objs {
		crd, ok := o.(*apiextensionsv1.CustomResourceDefinition)
		if !ok || crd.Spec.Group != gk.Group || crd.Status.AcceptedNames.Kind != gk.Kind || !apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) {
			continue
		}
		if v := allprojects.ServedVersion(crd); v != "" {
			return resourceInfo{schema.GroupVersionResource{Group: gk.Group, Version: v, Resource: crd.Status.AcceptedNames.Plural}, crd.Spec.Scope == apiextensionsv1.NamespaceScoped, []string{gk.Kind}}, true
		}
	}
	return resourceInfo{}, false
}

// resourceIn returns the resource through which the project of key reads
// an object of gvr: gvr itself, or, for a resource the project defines
// itself (read across projects at one version), the version the project's
// own CRD serves. Projects' groups are never the platform's, so a group no
// CRD of the project holds is the platform's.
func (t *term) resourceIn(key allprojects.Key, gvr schema.GroupVersionResource) schema.GroupVersionResource {
	if key.Project == "" {
		return gvr
	}
	objs, _ := t.crds.GetIndexer().ByIndex(allprojects.ByProject, key.ID)
	for _, o := range objs {
		crd, ok := o.(*apiextensionsv1.CustomResourceDefinition)
		if ok && crd.Spec.Group == gvr.Group && crd.Status.AcceptedNames.Plural == gvr.Resource {
			if v := allprojects.ServedVersion(crd); v != "" {
				return gvr.GroupResource().WithVersion(v)
			}
		}
	}
	return gvr
}

// watch reads one resource of one view into the graph.
func (t *term) watch(ctx context.Context, info resourceInfo, allProjects bool) {
	cfg := t.clients.Config("")
	if allProjects {
		cfg = t.clients.AllProjectsConfig()
	}
	client, err := metadata.NewForConfigAndClient(cfg, t.clients.HTTPClient())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Preparing a watch", "controller", Name, "resource", info.gvr)
		return
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.Resource(info.gvr).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.Resource(info.gvr).Watch(ctx, o)
		},
	}
	store := &graphStore{ctx: ctx, term: t, info: info, platform: !allProjects}
	cache.NewReflectorWithOptions(lw, &metav1.PartialObjectMetadata{}, store, cache.ReflectorOptions{Name: Name + ":" + info.gvr.String()}).RunWithContext(ctx)
}

// graphStore receives one resource's objects from its watch.
type graphStore struct {
	// ctx ends with the watch: a reflector stopped late changes nothing.
	ctx      context.Context
	term     *term
	info     resourceInfo
	platform bool
}

func (s *graphStore) node(obj any) (*node, metav1.Object, bool) {
	if s.ctx.Err() != nil {
		return nil, nil, false
	}
	if !s.platform {
		obj, _ = allprojects.Qualify(obj)
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil, false
	}
	key, ok := allprojects.KeyOf(obj, !s.info.namespaced)
	if !ok {
		return nil, nil, false
	}
	fins := m.GetFinalizers()
	deleting := m.GetDeletionTimestamp() != nil
	return &node{key: key, resource: s.info.gvr, uid: m.GetUID(), owners: m.GetOwnerReferences(),
		foreground: deleting && slices.Contains(fins, metav1.FinalizerDeleteDependents),
		orphan:     deleting && slices.Contains(fins, metav1.FinalizerOrphanDependents)}, m, true
}

func (s *graphStore) Add(obj any) error { return s.Update(obj) }

func (s *graphStore) Update(obj any) error {
	n, m, ok := s.node(obj)
	if !ok {
		return nil
	}
	if !keep(m) {
		s.term.graph.remove(n.resource, n.key)
		return nil
	}
	s.term.graph.put(n)
	if len(n.owners) > 0 {
		s.term.queue.Add(item{op: verify, resource: n.resource, key: n.key})
	}
	if n.foreground || n.orphan {
		s.term.queue.Add(item{op: finalize, resource: n.resource, key: n.key})
	}
	return nil
}

func (s *graphStore) Delete(obj any) error {
	n, m, ok := s.node(obj)
	if !ok {
		return nil
	}
	if s.info.kinds == nil { // a resource projects define
		s.term.gone(ownerKey{n.key.ID, m.GetUID()})
	}
	s.term.graph.remove(n.resource, n.key)
	// Its dependents may have lost their last owner.
	for _, d := range s.term.graph.dependentsOf(n.key.ID, m.GetUID()) {
		s.term.queue.Add(item{op: verify, resource: d.resource, key: d.key})
	}
	// An owner waiting for it may be done waiting.
	for _, ref := range n.owners {
		if owner, ok := s.term.ownerKey(n, ref); ok {
			s.term.queue.Add(item{op: finalize, resource: owner.resource, key: owner.key})
		}
	}
	return nil
}

func (s *graphStore) Replace(objs []any, _ string) error {
	if s.ctx.Err() != nil {
		return nil // a watch stopped: the graph's nodes of it are cleared
	}
	var nodes []*node
	present := make(map[ownerKey]struct{}, len(objs))
	for _, obj := range objs {
		n, m, ok := s.node(obj)
		if !ok {
			continue
		}
		present[ownerKey{n.key.ID, m.GetUID()}] = struct{}{}
		if keep(m) {
			nodes = append(nodes, n)
		}
	}
	s.term.graph.replace(s.info.gvr, s.platform, nodes)
	// Owners may have gone while nobody watched: every dependent is
	// checked again, and so is every dependent of another resource whose
	// owner of this group was not listed (deleted before this watch began,
	// or while it was down).
	for _, n := range nodes {
		if len(n.owners) > 0 {
			s.term.queue.Add(item{op: verify, resource: n.resource, key: n.key})
		}
		if n.foreground || n.orphan {
			s.term.queue.Add(item{op: finalize, resource: n.resource, key: n.key})
		}
	}
	kinds := s.info.kinds
	if kinds == nil {
		kinds = s.term.projectKindsOf(s.info.gvr.GroupResource())
	}
	for _, n := range s.term.graph.missingOwners(s.info.gvr.Group, kinds, s.platform, present) {
		s.term.queue.Add(item{op: verify, resource: n.resource, key: n.key})
	}
	return nil
}

func (s *graphStore) Resync() error { return nil }

// gone records an object of a project's own kind seen deleted.
func (t *term) gone(k ownerKey) {
	t.absentMu.Lock()
	defer t.absentMu.Unlock()
	if len(t.absent) >= maxAbsent {
		t.absentOld, t.absent = t.absent, map[ownerKey]struct{}{}
	}
	t.absent[k] = struct{}{}
}

// seenGone reports whether an object was seen deleted.
func (t *term) seenGone(k ownerKey) bool {
	t.absentMu.Lock()
	defer t.absentMu.Unlock()
	_, ok := t.absent[k]
	if !ok {
		_, ok = t.absentOld[k]
	}
	return ok
}

// ownerKey is the work item of the owner a reference of n names.
func (t *term) ownerKey(n *node, ref metav1.OwnerReference) (item, bool) {
	info, ok := t.kindOf(n.key, ref)
	if !ok {
		return item{}, false
	}
	k := allprojects.Key{Project: n.key.Project, ID: n.key.ID, Name: ref.Name}
	if info.namespaced {
		k.Namespace = n.key.Namespace
	}
	return item{op: finalize, resource: info.gvr, key: k}, true
}

// kindOf returns the resource of the kind an owner reference of a
// dependent of key names, as the dependent's project serves it.
func (t *term) kindOf(key allprojects.Key, ref metav1.OwnerReference) (resourceInfo, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return resourceInfo{}, false
	}
	view := 0
	if key.Project != "" {
		view = 1
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: ref.Kind}
	t.mu.Lock()
	info, ok := t.kinds[view][gk]
	t.mu.Unlock()
	if !ok && view == 1 {
		return t.projectKind(key.ID, gk)
	}
	return info, ok
}

func (t *term) sync(ctx context.Context, it item) error {
	ctx = allprojects.Within(ctx, it.key)
	it.resource = t.resourceIn(it.key, it.resource)
	client, err := metadata.NewForConfigAndClient(t.clients.Config(it.key.Project), t.clients.HTTPClient())
	if err != nil {
		return err
	}
	if it.op == finalize {
		return t.finalize(ctx, client, it)
	}
	return t.verify(ctx, client, it)
}

// ownerState is what one owner reference of a dependent finds.
type ownerState int

const (
	solid ownerState = iota
	// waiting: the owner is being deleted in the foreground.
	waiting
	// absent: dangling (missing, or another UID) or invalid.
	absent
)

// resolve looks an owner reference up in the dependent's own project.
func (t *term) resolve(ctx context.Context, client metadata.Interface, dependent allprojects.Key, ref metav1.OwnerReference) (ownerState, error) {
	if t.seenGone(ownerKey{dependent.ID, ref.UID}) {
		return absent, nil // UIDs are never reused
	}
	info, ok := t.kindOf(dependent, ref)
	if !ok {
		return solid, fmt.Errorf("owner kind %s %s is not served", ref.APIVersion, ref.Kind)
	}
	ns := ""
	if info.namespaced {
		if dependent.Namespace == "" {
			return absent, nil // a cluster-scoped dependent cannot have a namespaced owner
		}
		ns = dependent.Namespace
	}
	owner, err := client.Resource(info.gvr).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && !namesObject(err, info.gvr.GroupResource(), ref.Name):
		// The kind is not served (yet, or any more, at that version):
		// the server's view of the project's CRDs and this collector's
		// may differ for a moment, and that is no proof the owner is gone.
		return solid, fmt.Errorf("owner kind %s %s is not served: %w", ref.APIVersion, ref.Kind, err)
	case apierrors.IsNotFound(err):
		return absent, nil
	case err != nil:
		return solid, err
	case owner.UID != ref.UID:
		return absent, nil
	case owner.DeletionTimestamp != nil && slices.Contains(owner.Finalizers, metav1.FinalizerDeleteDependents):
		return waiting, nil
	}
	return solid, nil
}

// namesObject reports whether a NotFound error is the storage's answer for
// the object name of resource, rather than the server's for a path it does
// not serve: that one names nothing (the apiserver's own) or is not a Status
// at all (which client-go reports as "could not find the requested resource").
func namesObject(err error, resource schema.GroupResource, name string) bool {
	status, ok := err.(apierrors.APIStatus)
	if !ok {
		return false
	}
	s := status.Status()
	return s.Details != nil && s.Details.Name == name && s.Details.Kind == resource.Resource && s.Details.Group == resource.Group &&
		!strings.HasPrefix(s.Message, "the server could not find the requested resource")
}

// Decide returns what to do with a dependent whose owner references found
// states: nothing, drop the references of the owners listed, or delete it
// with the propagation policy given.
func Decide(refs []metav1.OwnerReference, states []ownerState, dependentFinalizers []string) (drop []types.UID, del *metav1.DeletionPropagation) {
	var solids, waitings, absents int
	for i, s := range states {
		switch s {
		case solid:
			solids++
		case waiting:
			waitings++
			drop = append(drop, refs[i].UID)
		case absent:
			absents++
			drop = append(drop, refs[i].UID)
		}
	}
	switch {
	case absents == 0 && waitings == 0:
		return nil, nil
	case solids > 0:
		return drop, nil
	}
	policy := metav1.DeletePropagationBackground
	switch {
	case waitings > 0 || slices.Contains(dependentFinalizers, metav1.FinalizerDeleteDependents):
		policy = metav1.DeletePropagationForeground
	case slices.Contains(dependentFinalizers, metav1.FinalizerOrphanDependents):
		policy = metav1.DeletePropagationOrphan
	}
	return nil, &policy
}

// verify decides for one dependent from its owners as they are now.
func (t *term) verify(ctx context.Context, client metadata.Interface, it item) error {
	dep, err := client.Resource(it.resource).Namespace(it.key.Namespace).Get(ctx, it.key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || dep.DeletionTimestamp != nil || len(dep.OwnerReferences) == 0 {
		return err
	}
	if len(dep.OwnerReferences) > maxOwners {
		return fmt.Errorf("%s has %d owner references; the collector resolves at most %d", it.key, len(dep.OwnerReferences), maxOwners)
	}
	states := make([]ownerState, len(dep.OwnerReferences))
	for i, ref := range dep.OwnerReferences {
		if states[i], err = t.resolve(ctx, client, it.key, ref); err != nil {
			return err
		}
	}
	drop, policy := Decide(dep.OwnerReferences, states, dep.Finalizers)
	switch {
	case policy != nil:
		err := client.Resource(it.resource).Namespace(it.key.Namespace).Delete(ctx, it.key.Name,
			metav1.DeleteOptions{PropagationPolicy: policy, Preconditions: &metav1.Preconditions{UID: &dep.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case len(drop) > 0:
		return dropReferences(ctx, client, it, dep, drop)
	}
	return nil
}

// dropReferences removes owner references from a dependent; the UID in the
// patch makes it apply to this very object only.
func dropReferences(ctx context.Context, client metadata.Interface, it item, dep *metav1.PartialObjectMetadata, uids []types.UID) error {
	kept := []metav1.OwnerReference{}
	for _, ref := range dep.OwnerReferences {
		if !slices.Contains(uids, ref.UID) {
			kept = append(kept, ref)
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": kept, "uid": dep.UID}})
	if err != nil {
		return err
	}
	_, err = client.Resource(it.resource).Namespace(it.key.Namespace).Patch(ctx, it.key.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// finalize works for an owner being deleted with foregroundDeletion (its
// dependents go first; it goes when none blocking it is left) or orphan (its
// dependents lose their reference to it, then it goes).
func (t *term) finalize(ctx context.Context, client metadata.Interface, it item) error {
	owner, err := client.Resource(it.resource).Namespace(it.key.Namespace).Get(ctx, it.key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || owner.DeletionTimestamp == nil {
		return err
	}
	orphan, foreground := slices.Contains(owner.Finalizers, metav1.FinalizerOrphanDependents), slices.Contains(owner.Finalizers, metav1.FinalizerDeleteDependents)
	if !orphan && !foreground {
		return nil
	}
	blocking := 0
	for _, d := range t.graph.dependentsOf(it.key.ID, owner.UID) {
		resource := t.resourceIn(d.key, d.resource)
		dep, err := client.Resource(resource).Namespace(d.key.Namespace).Get(ctx, d.key.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		i := slices.IndexFunc(dep.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == owner.UID })
		if i < 0 {
			continue
		}
		if orphan {
			if err := dropReferences(ctx, client, item{resource: resource, key: d.key}, dep, []types.UID{owner.UID}); err != nil {
				return err
			}
			continue
		}
		if ref := dep.OwnerReferences[i]; ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
			blocking++
		}
		t.queue.Add(item{op: verify, resource: d.resource, key: d.key})
	}
	if blocking > 0 {
		// Each blocking dependent's deletion queues this owner again; until
		// then, a growing backoff (its finalizers are its tenant's).
		return manager.Waiting{Reason: fmt.Sprintf("%d dependents block the deletion", blocking)}
	}
	finalizer := metav1.FinalizerDeleteDependents
	if orphan {
		finalizer = metav1.FinalizerOrphanDependents
	}
	owner.Finalizers = slices.DeleteFunc(owner.Finalizers, func(f string) bool { return f == finalizer })
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": owner.Finalizers, "uid": owner.UID, "resourceVersion": owner.ResourceVersion}})
	if err != nil {
		return err
	}
	_, err = client.Resource(it.resource).Namespace(it.key.Namespace).Patch(ctx, it.key.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err // a conflict is retried with the owner as it is now
}
