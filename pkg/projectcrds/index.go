package projectcrds

import (
	"context"
	"strings"
	"sync"
	"unique"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenancy"
)

// classAnnotation carries, on the index's copies of a project CRD only, its
// schema class, computed by the server whatever the stored object says.
const classAnnotation = "projectcrds.milo.internal/class"

// ByResource is the name of the Index's index of CRDs by the resource whose
// names they hold ("<plural>.<group>").
const ByResource = "resource"

// Index holds every project's CRDs: one informer over the all-projects view,
// each CRD kept as an entry (its identity and status; its spec and names
// shared with every CRD of its schema class, so 100,000 projects defining
// the same CRD keep one copy of its schemas), indexed by project and
// resource. Its zero value holds nothing until Init; admission, discovery
// and serving read it.
type Index struct {
	crds cache.SharedIndexInformer

	mu      sync.Mutex
	classes map[Class]*classEntry
	// statuses are the distinct statuses entries share (at most maxShared).
	statuses map[string]*statusEntry

	// watches are the open watches of projects' kinds (watches.go).
	watches watchEnds
	// pending are the CRDs admitted for creation not in the index yet.
	pending creates
}

// entry is what the index keeps of one project's CRD: its metadata, minus
// what the server never reads (annotations, labels, managed fields), and
// pointers to what it shares with others. A few hundred bytes, where the
// decoded CRD is a few kilobytes. It is a metav1.Object but no
// runtime.Object: client-go's watch-list consistency detector, which casts
// an informer's objects to runtime.Object, must stay off (the server does
// not use watch-list for its own informers).
type entry struct {
	metav1.ObjectMeta
	class  *classEntry
	status *statusEntry
}

// classEntry is what every CRD of one schema class has alike.
type classEntry struct {
	class       Class
	spec        apiextensionsv1.CustomResourceDefinitionSpec
	names       apiextensionsv1.CustomResourceDefinitionNames
	annotations map[string]string
	// name is the CRD name its names make (<plural>.<group>).
	name string
}

// statusEntry is a CRD's conditions (without their times, which the server
// never reads) and stored versions: the same for nearly every CRD.
type statusEntry struct {
	conditions []apiextensionsv1.CustomResourceDefinitionCondition
	stored     []string
}

// maxShared bounds the distinct statuses the index shares: conditions'
// messages name what a CRD conflicts with, so their variety is not the
// server's to bound; past it, an entry keeps a status of its own.
const maxShared = 4096

// Init prepares the index; its informer reads the all-projects view through
// clients and runs once Run is called.
func (s *Index) Init(clients *allprojects.Clients) error {
	s.classes, s.statuses = map[Class]*classEntry{}, map[string]*statusEntry{}
	crds, err := clients.Informer(allprojects.CRDREST, "customresourcedefinitions", &apiextensionsv1.CustomResourceDefinition{}, true, nil, s.keep)
	if err == nil {
		err = allprojects.IndexByProject(crds)
	}
	if err == nil {
		err = crds.AddIndexers(cache.Indexers{ByResource: byResource})
	}
	if err == nil {
		_, err = crds.AddEventHandler(s.handler())
	}
	if err != nil {
		return err
	}
	s.crds = crds
	return nil
}

// byResource indexes a CRD by the resource its accepted plural names,
// whatever its conditions say: its objects are stored there as long as it
// has one (a CRD whose names a later change conflicts keeps them).
func byResource(obj any) ([]string, error) {
	e, ok := obj.(*entry)
	if !ok || e.class.names.Plural == "" {
		return nil, nil
	}
	return []string{e.class.names.Plural + "." + e.class.spec.Group}, nil
}

// crd is the entry as a CRD, for reading only: it shares its spec, names,
// conditions and metadata with the index.
func (e *entry) crd() *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: e.ObjectMeta, Spec: e.class.spec,
		Status: apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: e.class.names, Conditions: e.status.conditions, StoredVersions: e.status.stored}}
	crd.Annotations = e.class.annotations
	return crd
}

// keep is the informer's transform after allprojects.Qualify: it makes the
// CRD an entry of its class.
func (s *Index) keep(obj any) (any, error) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return obj, nil
	}
	// Always computed, never read from the object: a tenant may write any
	// annotation, and a class named by a tenant would hand another
	// project's requests to a handler built from the tenant's schema.
	class, err := ClassOf(crd)
	if err != nil {
		// A class of its own, rather than an error that would stop the
		// index for every project.
		klog.ErrorS(err, "Hashing a project CRD's schema class", "crd", crd.Name)
		class = Class(classPrefix + "uid-" + string(crd.UID))
	}
	// One copy of a project's qualified namespace for all its CRDs.
	e := &entry{ObjectMeta: metav1.ObjectMeta{Name: crd.Name, Namespace: unique.Make(crd.Namespace).Value(), UID: crd.UID, ResourceVersion: crd.ResourceVersion,
		Generation: crd.Generation, CreationTimestamp: crd.CreationTimestamp, DeletionTimestamp: crd.DeletionTimestamp, Finalizers: crd.Finalizers}}
	conditions := make([]apiextensionsv1.CustomResourceDefinitionCondition, len(crd.Status.Conditions))
	var key strings.Builder
	for i, c := range crd.Status.Conditions {
		conditions[i] = apiextensionsv1.CustomResourceDefinitionCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
		key.WriteString(string(c.Type) + "\x00" + string(c.Status) + "\x00" + c.Reason + "\x00" + c.Message + "\x00")
	}
	key.WriteString("\x01" + strings.Join(crd.Status.StoredVersions, "\x00"))
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.classes[class]
	if c == nil {
		c = &classEntry{class: class, spec: crd.Spec, names: crd.Status.AcceptedNames,
			annotations: map[string]string{classAnnotation: string(class)}, name: crd.Status.AcceptedNames.Plural + "." + crd.Spec.Group}
		s.classes[class] = c
	}
	e.class = c
	if e.Name == c.name {
		e.Name = c.name // one copy of the name for the class
	}
	if st := s.statuses[key.String()]; st != nil {
		e.status = st
	} else {
		e.status = &statusEntry{conditions: conditions, stored: crd.Status.StoredVersions}
		if len(s.statuses) < maxShared {
			s.statuses[key.String()] = e.status
		}
	}
	return e, nil
}

// entries returns the index's entries among objs.
func entries(objs []any) []*entry {
	out := make([]*entry, 0, len(objs))
	for _, o := range objs {
		if e, ok := o.(*entry); ok {
			out = append(out, e)
		}
	}
	return out
}

// ofProject returns the CRDs of one project (by storage id).
func (s *Index) ofProject(projectID string) []*apiextensionsv1.CustomResourceDefinition {
	if s == nil || s.crds == nil {
		return nil
	}
	objs, _ := s.crds.GetIndexer().ByIndex(allprojects.ByProject, projectID)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(objs))
	for _, e := range entries(objs) {
		out = append(out, e.crd())
	}
	return out
}

// namesOf returns the names of one project's CRDs (by storage id).
func (s *Index) namesOf(projectID string) []string {
	if s == nil || s.crds == nil {
		return nil
	}
	objs, _ := s.crds.GetIndexer().ByIndex(allprojects.ByProject, projectID)
	out := make([]string, 0, len(objs))
	for _, e := range entries(objs) {
		out = append(out, e.Name)
	}
	return out
}

// lookup returns the CRD named name of the project of t, if it has one.
func (s *Index) lookup(t tenancy.Tenant, name string) *apiextensionsv1.CustomResourceDefinition {
	if s == nil || s.crds == nil {
		return nil
	}
	key := allprojects.Key{Project: t.Name, ID: t.ID, Name: name}
	obj, ok, err := s.crds.GetStore().GetByKey(key.StoreKey())
	if err != nil || !ok {
		return nil
	}
	if e, ok := obj.(*entry); ok {
		return e.crd()
	}
	return nil
}

// definingResource returns the entries of every project's CRD whose
// accepted plural is resource's ("<plural>.<group>").
func (s *Index) definingResource(resource string) []*entry {
	if s == nil || s.crds == nil {
		return nil
	}
	objs, _ := s.crds.GetIndexer().ByIndex(ByResource, resource)
	return entries(objs)
}

// liveClasses returns the classes some project's CRD has, and forgets the
// shared parts of the others (and the statuses, which entries keep).
func (s *Index) liveClasses() sets.Set[Class] {
	live := sets.New[Class]()
	if s == nil || s.crds == nil {
		return live
	}
	for _, e := range entries(s.crds.GetStore().List()) {
		live.Insert(e.class.class)
	}
	s.mu.Lock()
	for c := range s.classes {
		if !live.Has(c) {
			delete(s.classes, c)
		}
	}
	clear(s.statuses)
	s.mu.Unlock()
	return live
}

// KeyPrefixes returns the etcd key prefixes of the resources one project's
// CRDs define (by storage id), under the server's storage prefix: where their
// instances are, for purging the project.
func (s *Index) KeyPrefixes(projectID, storagePrefix string) []string {
	var out []string
	for _, crd := range s.ofProject(projectID) {
		if crd.Status.AcceptedNames.Plural != "" {
			out = append(out, tenantstorage.CustomResourcePrefix(storagePrefix, crd.Spec.Group, crd.Status.AcceptedNames.Plural))
		}
	}
	return out
}

// definesGroup reports whether some project holds names in group: a CRD of
// the group whose plural was accepted. One refused its names (a group the
// platform already serves) holds nothing, so it cannot keep the platform
// from adding to its own group. It reads the index's resources, not its
// CRDs: as many as the distinct resources projects define.
func (s *Index) definesGroup(group string) bool {
	if s == nil || s.crds == nil {
		return false
	}
	for _, resource := range s.crds.GetIndexer().ListIndexFuncValues(ByResource) {
		if _, g, _ := strings.Cut(resource, "."); g == group {
			return true
		}
	}
	return false
}

// Run fills the index and keeps it current until ctx ends; false if ctx
// ended before it was filled.
func (s *Index) Run(ctx context.Context) bool {
	if s.crds == nil {
		return false
	}
	go s.crds.Run(ctx.Done())
	return cache.WaitForCacheSync(ctx.Done(), s.crds.HasSynced)
}

// handler follows the index's CRDs for the watches they serve (watches.go)
// and the creates reserved until the index holds them (creates.go).
func (s *Index) handler() cache.ResourceEventHandler {
	key := func(obj any) string {
		k, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return k
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if k, ok := allprojects.KeyOf(obj, true); ok && k.ID != "" {
				s.pending.seen(k.ID, k.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*entry)
			e, ok2 := newObj.(*entry)
			if ok1 && ok2 && old.class.class != e.class.class {
				s.watches.changed(key(e), e.class.class)
			}
		},
		DeleteFunc: func(obj any) { s.watches.changed(key(obj), "") },
	}
}
