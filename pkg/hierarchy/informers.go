package hierarchy

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/typedinformer"
)

// resync is how often the informers hand every object to their handlers again.
const resync = 10 * time.Minute

// typedKinds are the kinds the factory's informers hold as their Go types: the
// hierarchy's, one of each per project or organization. A custom resource's
// unstructured copy is a tree of maps, three times the bytes of the struct.
var typedKinds = map[schema.GroupVersionResource]func() runtime.Object{
	organizations: func() runtime.Object { return &resourcemanagerv1alpha1.Organization{} },
	folders:       func() runtime.Object { return &resourcemanagerv1alpha1.Folder{} },
	projects:      func() runtime.Object { return &resourcemanagerv1alpha1.Project{} },
	Memberships:   func() runtime.Object { return &resourcemanagerv1alpha1.OrganizationMembership{} },
}

// NewInformerFactory returns the shared informer factory of Milo's objects.
// Organizations, Folders, Projects and OrganizationMemberships are held as
// their Go types (*resourcemanagerv1alpha1.Project and so on; Object,
// ParentOf, IsReady and AsUnstructured read them), every other resource as
// unstructured. Its informers keep objects without their managedFields:
// nothing reads them, they are a large part of every object's memory, and
// an update sent without them keeps the stored ones.
func NewInformerFactory(config *rest.Config) (dynamicinformer.DynamicSharedInformerFactory, error) {
	return newInformerFactory(config, nil)
}

// newInformerFactory is NewInformerFactory whose typed kinds are read
// in-process from the storage stores returns for their resource, where it
// returns one (see typedinformer.NewFromSharedStorage).
func newInformerFactory(config *rest.Config, stores func(resource string) typedinformer.Storage) (*slimFactory, error) {
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	rc, err := typedinformer.NewClient(config, resourcemanagerv1alpha1.SchemeGroupVersion, resourcemanagerv1alpha1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return &slimFactory{
		DynamicSharedInformerFactory: dynamicinformer.NewDynamicSharedInformerFactory(client, resync),
		rest:                         rc,
		stores:                       stores,
		typed:                        map[schema.GroupVersionResource]cache.SharedIndexInformer{},
		started:                      map[schema.GroupVersionResource]bool{},
	}, nil
}

// slimFactory is the dynamic factory with the hierarchy's kinds typed.
type slimFactory struct {
	dynamicinformer.DynamicSharedInformerFactory
	rest *rest.RESTClient
	// stores, if set, returns the in-process storage of a typed kind's
	// resource, or nil.
	stores func(resource string) typedinformer.Storage

	mu       sync.Mutex
	typed    map[schema.GroupVersionResource]cache.SharedIndexInformer
	started  map[schema.GroupVersionResource]bool
	shutdown bool
	wg       sync.WaitGroup
}

func (f *slimFactory) ForResource(gvr schema.GroupVersionResource) informers.GenericInformer {
	newObject, ok := typedKinds[gvr]
	if !ok {
		gi := f.DynamicSharedInformerFactory.ForResource(gvr)
		// Fails only once the informer runs, by when it has the transform.
		_ = gi.Informer().SetTransform(dropManagedFields)
		return gi
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	inf := f.typed[gvr]
	if inf == nil {
		indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
		if f.stores != nil {
			inf = typedinformer.NewFromSharedStorage(func() typedinformer.Storage { return f.stores(gvr.Resource) }, f.rest, gvr.Resource, newObject(), resync, indexers, nil)
		} else {
			inf = typedinformer.New(f.rest, gvr.Resource, newObject(), resync, indexers, nil)
		}
		f.typed[gvr] = inf
	}
	return typedInformer{inf, gvr.GroupResource()}
}

func (f *slimFactory) Start(stopCh <-chan struct{}) {
	f.DynamicSharedInformerFactory.Start(stopCh)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shutdown {
		return
	}
	for gvr, inf := range f.typed {
		if !f.started[gvr] {
			f.started[gvr] = true
			f.wg.Go(func() { inf.Run(stopCh) })
		}
	}
}

func (f *slimFactory) WaitForCacheSync(stopCh <-chan struct{}) map[schema.GroupVersionResource]bool {
	out := f.DynamicSharedInformerFactory.WaitForCacheSync(stopCh)
	started := map[schema.GroupVersionResource]cache.SharedIndexInformer{}
	f.mu.Lock()
	for gvr := range f.started {
		started[gvr] = f.typed[gvr]
	}
	f.mu.Unlock()
	for gvr, inf := range started {
		out[gvr] = cache.WaitForCacheSync(stopCh, inf.HasSynced)
	}
	return out
}

func (f *slimFactory) Shutdown() {
	f.mu.Lock()
	f.shutdown = true
	f.mu.Unlock()
	f.DynamicSharedInformerFactory.Shutdown()
	f.wg.Wait()
}

// typedInformer is a GenericInformer over an informer of Go types.
type typedInformer struct {
	inf cache.SharedIndexInformer
	gr  schema.GroupResource
}

func (t typedInformer) Informer() cache.SharedIndexInformer { return t.inf }
func (t typedInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(t.inf.GetIndexer(), t.gr)
}

func dropManagedFields(obj any) (any, error) {
	typedinformer.DropManagedFields(obj)
	return obj, nil
}
