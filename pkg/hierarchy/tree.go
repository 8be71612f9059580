package hierarchy

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	registryrest "k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/typedinformer"
)

// Tree is the server's one cache of the hierarchy: one shared informer each for
// Organizations, Folders, Projects and OrganizationMemberships. Admission, the tenant router and the
// hierarchy controllers all read it (the controllers through Factory), so each
// object is cached once. A miss is confirmed with a live read: an object created
// a moment ago may not be cached yet.
type Tree struct {
	client   dynamic.Interface
	factory  dynamicinformer.DynamicSharedInformerFactory
	orgs     cache.SharedIndexInformer
	folders  cache.SharedIndexInformer
	projects cache.SharedIndexInformer
	// memberships tell who owns an organization.
	memberships cache.SharedIndexInformer
	// stores read the hierarchy's kinds in-process, by resource, for what
	// the informers do not hold yet (UseStorage); without, the loopback.
	stores map[string]registryrest.Getter
}

// UseStorage makes the Tree read resource from storage, in-process, when its
// informer does not hold an object yet (one created a moment ago), instead
// of over the loopback, which takes a whole request through the handler
// chain — authentication, priority and fairness, authorization — while the
// request that asked waits; and makes the informers of resource read it
// in-process too. Call it before the server serves.
func (t *Tree) UseStorage(resource string, storage registryrest.Getter) {
	if t.stores == nil {
		t.stores = map[string]registryrest.Getter{}
	}
	t.stores[resource] = storage
	if _, ok := storage.(typedinformer.Storage); !ok {
		klog.InfoS("The hierarchy's informer of a resource reads it over the loopback: its storage cannot list and watch", "resource", resource)
	}
}

// CountProjects counts org's Projects in storage, read in-process: how
// many, and the revision of storage read (a list at that revision holds
// every Project stored before it). It reads the Projects' watch cache, as
// fresh as etcd.
func (t *Tree) CountProjects(ctx context.Context, org string) (count, revision int64, err error) {
	lister, ok := t.stores["projects"].(registryrest.Lister)
	if !ok {
		return 0, 0, fmt.Errorf("the storage of Projects is not read in-process")
	}
	list, err := lister.List(ctx, &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{tenancy.OrganizationLabel: org})})
	if err != nil {
		return 0, 0, err
	}
	m, err := meta.ListAccessor(list)
	if err != nil {
		return 0, 0, err
	}
	if revision, err = strconv.ParseInt(m.GetResourceVersion(), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("the list of Projects has resource version %q: %w", m.GetResourceVersion(), err)
	}
	return int64(meta.LenList(list)), revision, nil
}

// Init prepares the informers over the server's loopback connection; Run starts
// them. Admission is registered before the server exists, so the Tree is made
// empty and initialized once the loopback configuration is known.
func (t *Tree) Init(loopback *rest.Config) error {
	client, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return err
	}
	// The hierarchy's own kinds are read in-process once UseStorage has
	// handed their storage over (before the informers run): a Project's
	// every event would otherwise be encoded by the server and decoded
	// here again, and 100,000 of them listed so at every start.
	factory, err := newInformerFactory(loopback, func(resource string) typedinformer.Storage {
		s, _ := t.stores[resource].(typedinformer.Storage)
		return s
	})
	if err != nil {
		return err
	}
	t.client, t.factory = client, factory
	t.orgs = t.factory.ForResource(organizations).Informer()
	t.folders = t.factory.ForResource(folders).Informer()
	t.projects = t.factory.ForResource(projects).Informer()
	t.memberships = t.factory.ForResource(Memberships).Informer()
	phases := newPhases()
	for kind, inf := range map[string]cache.SharedIndexInformer{"Organization": t.orgs, "Folder": t.folders, "Project": t.projects} {
		if err := phases.watch(kind, inf); err != nil {
			return err
		}
	}
	phases.register()
	return AddIndexes(t.folders, t.projects)
}

// AddIndexes adds the ByOrganization and ByParent indexes to informers of
// Folders and Projects that lack them. Informers that already run must have them.
func AddIndexes(informers ...cache.SharedIndexInformer) error {
	for _, inf := range informers {
		if _, ok := inf.GetIndexer().GetIndexers()[ByParent]; ok {
			continue
		}
		if err := inf.AddIndexers(cache.Indexers{ByOrganization: byOrganization, ByParent: byParent}); err != nil {
			return err
		}
	}
	return nil
}

// Index names of the Folder and Project informers.
const (
	// ByOrganization indexes by the organization label.
	ByOrganization = "organization"
	// ByParent indexes by the parent, as ParentKey gives it.
	ByParent = "parent"
)

// ParentKey is the ByParent index value of the children of the named Organization or Folder.
func ParentKey(kind, name string) string { return kind + "/" + name }

func byOrganization(obj any) ([]string, error) {
	m := Object(obj)
	if m == nil || m.GetLabels()[tenancy.OrganizationLabel] == "" {
		return nil, nil
	}
	return []string{m.GetLabels()[tenancy.OrganizationLabel]}, nil
}

func byParent(obj any) ([]string, error) {
	kind, name := ParentOf(obj)
	if kind == "" || name == "" {
		return nil, nil
	}
	return []string{ParentKey(kind, name)}, nil
}

func (t *Tree) initialized() bool { return t.client != nil }

// Parent returns the parent (kind and name) of a Folder or Project, from the
// cache or, for one created a moment ago, a live read; found is false when the
// object does not exist.
func (t *Tree) Parent(ctx context.Context, isFolder bool, name string) (kind, parent string, found bool, err error) {
	inf, gvr := t.projects, projects
	if isFolder {
		inf, gvr = t.folders, folders
	}
	obj, err := t.get(ctx, inf, gvr, name)
	switch {
	case apierrors.IsNotFound(err):
		return "", "", false, nil
	case err != nil:
		return "", "", false, err
	}
	kind, parent = ParentOf(obj)
	return kind, parent, true, nil
}

// Factory is the informer factory the hierarchy's informers come from.
func (t *Tree) Factory() dynamicinformer.DynamicSharedInformerFactory { return t.factory }

// Run starts the informers and waits for them to sync; call it once the CRDs are established.
func (t *Tree) Run(ctx context.Context) bool {
	t.factory.Start(ctx.Done())
	return cache.WaitForCacheSync(ctx.Done(), t.orgs.HasSynced, t.folders.HasSynced, t.projects.HasSynced, t.memberships.HasSynced)
}

// get returns the named object: the informer's (a Go type) or, for one
// created a moment ago, what read finds.
func (t *Tree) get(ctx context.Context, inf cache.SharedIndexInformer, gvr schema.GroupVersionResource, name string) (metav1.Object, error) {
	if obj, ok, _ := inf.GetStore().GetByKey(name); ok {
		if m := Object(obj); m != nil {
			return m, nil
		}
	}
	return t.read(ctx, gvr, name)
}

// read reads an object of the hierarchy's group from storage: in-process
// where UseStorage handed the Tree its storage (a Go type), else over the
// loopback (unstructured).
func (t *Tree) read(ctx context.Context, gvr schema.GroupVersionResource, name string) (metav1.Object, error) {
	if s := t.stores[gvr.Resource]; s != nil {
		return readStorage(ctx, s, name)
	}
	return t.client.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
}

// readStorage reads name from storage as the object its Go type. The
// object is the storage's answer, not a copy: callers only read it.
func readStorage(ctx context.Context, storage registryrest.Getter, name string) (metav1.Object, error) {
	// A context of its own: the asking request's carries its tenant, its
	// namespace and its user, none of which belongs to a platform object's
	// read. It ends with the request.
	read, cancel := context.WithTimeout(context.Background(), storageReadTimeout)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	obj, err := storage.Get(read, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	m := Object(obj)
	if m == nil {
		return nil, fmt.Errorf("storage of %s returned %T", name, obj)
	}
	return m, nil
}

// storageReadTimeout bounds an in-process read of the hierarchy, as the
// loopback client's request timeout would.
const storageReadTimeout = 30 * time.Second

// Project tells the tenant router whether a project exists, is ready, or is
// being deleted, and where its objects are stored.
func (t *Tree) Project(ctx context.Context, name string) (tenancy.ProjectInfo, error) {
	p, err := t.get(ctx, t.projects, projects, name)
	switch {
	case apierrors.IsNotFound(err):
		return tenancy.ProjectInfo{State: tenancy.ProjectMissing}, nil
	case err != nil:
		return tenancy.ProjectInfo{State: tenancy.ProjectMissing}, err
	}
	info := tenancy.ProjectInfo{State: tenancy.ProjectActive, ID: tenancy.StorageIDOf(p)}
	switch {
	case p.GetDeletionTimestamp() != nil:
		info.State = tenancy.ProjectDeleting
	case !initialized(p):
		info.State = tenancy.ProjectInitializing
	}
	return info, nil
}

// CachedProjectID returns the storage id of the named project if it is cached.
func (t *Tree) CachedProjectID(name string) string {
	if !t.initialized() {
		return ""
	}
	obj, ok, _ := t.projects.GetStore().GetByKey(name)
	if !ok {
		return ""
	}
	m := Object(obj)
	if m == nil {
		return ""
	}
	return tenancy.StorageIDOf(m)
}

// CachedOrganizationOf returns the organization of the named project if it is
// cached, "" otherwise; it never reads storage.
func (t *Tree) CachedOrganizationOf(project string) string {
	if !t.initialized() {
		return ""
	}
	obj, ok, _ := t.projects.GetStore().GetByKey(project)
	if !ok {
		return ""
	}
	if m := Object(obj); m != nil {
		return m.GetLabels()[tenancy.OrganizationLabel]
	}
	return ""
}

// ProjectNames returns the names of the cached projects whose storage ids are
// keys of ids: one pass over the cache, nothing kept.
func (t *Tree) ProjectNames(ids map[string]int64) map[string]string {
	out := make(map[string]string, len(ids))
	if !t.initialized() || len(ids) == 0 {
		return out
	}
	for _, obj := range t.projects.GetStore().List() {
		if m := Object(obj); m != nil {
			if id := tenancy.StorageIDOf(m); ids[id] != 0 {
				out[id] = m.GetName()
			}
		}
	}
	return out
}

// ProjectIDs returns the storage ids of the cached projects.
func (t *Tree) ProjectIDs() []string {
	if !t.initialized() {
		return nil
	}
	objs := t.projects.GetStore().List()
	out := make([]string, 0, len(objs))
	for _, obj := range objs {
		if m := Object(obj); m != nil {
			out = append(out, tenancy.StorageIDOf(m))
		}
	}
	return out
}

// EndRequestsOfDeleted ends, through lifetimes, the requests in flight of every
// Project and Organization that is deleted, or replaced by another of the same
// name, from now on. One event handler per informer, nothing per tenant.
func (t *Tree) EndRequestsOfDeleted(lifetimes *tenancy.Lifetimes) error {
	for _, x := range []struct {
		inf    cache.SharedIndexInformer
		tenant func(string) tenancy.Tenant
	}{{t.projects, tenancy.ProjectTenant}, {t.orgs, tenancy.OrganizationTenant}} {
		tenant := x.tenant
		if _, err := x.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(oldObj, newObj any) {
				o, n := Object(oldObj), Object(newObj)
				if o != nil && n != nil && o.GetUID() != n.GetUID() {
					lifetimes.End(tenant(o.GetName()))
				}
			},
			DeleteFunc: func(obj any) {
				if m := Object(obj); m != nil {
					lifetimes.End(tenant(m.GetName()))
				}
			},
		}); err != nil {
			return err
		}
	}
	return nil
}

// OrganizationExists reports whether the named Organization exists.
func (t *Tree) OrganizationExists(ctx context.Context, name string) (bool, error) {
	_, err := t.get(ctx, t.orgs, organizations, name)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	default:
		return true, nil
	}
}

// OrganizationGoing reports whether the named Organization is being deleted or gone.
func (t *Tree) OrganizationGoing(ctx context.Context, name string) (bool, error) {
	org, err := t.get(ctx, t.orgs, organizations, name)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	default:
		return org.GetDeletionTimestamp() != nil, nil
	}
}

// MembershipsOf returns the cached OrganizationMemberships of an
// organization's namespace, as unstructured copies (an organization has few).
func (t *Tree) MembershipsOf(org string) []*unstructured.Unstructured {
	objs, _ := t.memberships.GetIndexer().ByIndex(cache.NamespaceIndex, tenancy.OrganizationNamespace(org))
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, err := AsUnstructured(o); err == nil {
			out = append(out, u)
		}
	}
	return out
}

// OrganizationOf returns the organization label of a Folder, Project or
// ProjectSuspension, and whether it exists.
func (t *Tree) OrganizationOf(ctx context.Context, gr schema.GroupResource, name string) (string, bool, error) {
	var obj metav1.Object
	var err error
	switch {
	case gr == tenancy.SuspensionsResource:
		// Few, and asked for only by an organization's get or delete of
		// one: read, not cached.
		obj, err = t.read(ctx, suspensions, name)
	case gr.Resource == folders.Resource:
		obj, err = t.get(ctx, t.folders, folders, name)
	default:
		obj, err = t.get(ctx, t.projects, projects, name)
	}
	switch {
	case apierrors.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, err
	default:
		return obj.GetLabels()[tenancy.OrganizationLabel], true, nil
	}
}
