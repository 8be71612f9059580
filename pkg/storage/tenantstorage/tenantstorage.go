// Package tenantstorage puts the tenant into every storage key and keeps one
// watch cache per resource for all tenants.
//
// Keys are <resource prefix>/<tenant segment>/[<namespace>/]<name>, where the
// segment is the project's storage id (made from its UID, never reused), or
// "_platform" for the platform (see tenancy.KeySegment). The layer sits on top
// of whatever storage the apiserver builds for a resource — normally the watch
// cache (cacher) over etcd — and:
//
//   - rewrites the key of every call for the tenant in the request context, so a
//     project's Get, List and Watch only ever touch its own key range;
//   - stamps the tenant annotation on every object written, overwriting what a
//     client sent, and derives the cache's object keys from it;
//   - adds a tenant field to every object's attributes and makes it the cache's
//     trigger index, so a project's watchers are indexed by tenant and an event is
//     offered only to its own tenant's watchers and to all-projects watchers.
//
// Nothing here allocates per tenant: tenants are values in keys and fields.
package tenantstorage

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/tenancy"
)

// TenantField is the attribute (field) under which an object's tenant segment is
// indexed. It is internal: clients cannot select on it, because the REST layer
// validates field selectors before they reach storage.
const TenantField = "milo.tenant"

// Options are what the tenant-keyed storage of every resource shares.
type Options struct {
	// Prefixes records every resource prefix decorated, for Purge.
	Prefixes *Prefixes
	// MaxListItems bounds what a tenant's LIST returns (see boundedList; 0: no bound).
	MaxListItems int64
	// Shown, if not nil, narrows what the all-projects view shows to anyone
	// but the server's superusers.
	Shown Shown
	// Meter, if not nil, is told of every write of a project's objects.
	Meter Meter
	// Joints, if not nil, stores companions with creates (etcd only).
	Joints *Joints
	// Share, if not nil, is given every object storage decodes, with its
	// resource, to point values many objects hold at one copy (see
	// sharingCodec). It must only replace values with equal ones.
	Share func(schema.GroupResource, runtime.Object)
	// TenancyMaps, if not nil, gives the objects entering the watch caches
	// one annotations map per project (one set for every resource).
	TenancyMaps *TenancyMaps
}

// Decorate returns a storage decorator that makes inner's storage tenant-keyed.
func Decorate(inner generic.StorageDecorator, o Options) generic.StorageDecorator {
	return func(
		config *storagebackend.ConfigForResource,
		resourcePrefix string,
		keyFunc func(obj runtime.Object) (string, error),
		newFunc func() runtime.Object,
		newListFunc func() runtime.Object,
		getAttrsFunc storage.AttrFunc,
		_ storage.IndexerFuncs,
		indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		if o.Prefixes != nil {
			o.Prefixes.add(config.Config.Prefix, resourcePrefix, config.GroupResource)
		}
		shared := *config
		shared.Config.Codec = sharingCodec{Codec: config.Config.Codec, resource: config.GroupResource, share: o.Share}
		config = &shared
		s := &store{prefix: resourcePrefix, resource: config.GroupResource, maxListItems: o.MaxListItems, shown: o.Shown, newFunc: newFunc, newList: newListFunc,
			codec: config.Config.Codec, joints: o.Joints, transformer: transformerOf(config.Config.Transformer), decoder: etcd3.NewDefaultDecoder(config.Config.Codec, versioner)}
		s.pathPrefix = path.Join("/", config.Config.Prefix)
		if !strings.HasSuffix(s.pathPrefix, "/") {
			s.pathPrefix += "/"
		}
		if !unmetered[config.GroupResource] {
			s.meter = o.Meter
		}
		tenantKeyFunc := func(obj runtime.Object) (string, error) {
			key, err := keyFunc(obj)
			if err != nil {
				return "", err
			}
			return s.withSegment(key, segmentOf(obj))
		}
		s.keyFunc = tenantKeyFunc
		// The tenant is the cache's only trigger: upstream triggers (pods by node)
		// are not served by Milo, and the cache supports one index.
		triggers := storage.IndexerFuncs{TenantField: segmentOf}
		// The watch cache computes the key of each object it takes in, new
		// from storage, before anyone else holds it (processEvent, Replace):
		// the moment to share its annotations. This key function changes
		// the object it is given: it must reach nothing but the watch
		// cache (and its consistency check, which keys copies of cached
		// objects: sharing sets the copy's map, and keeps its project's
		// entry as a new object of the project would). The store's own
		// keys (s.keyFunc) are of objects being written, which are not
		// shared.
		cacheKeyFunc := tenantKeyFunc
		if o.TenancyMaps != nil {
			cacheKeyFunc = func(obj runtime.Object) (string, error) {
				o.TenancyMaps.share(obj)
				return tenantKeyFunc(obj)
			}
		}
		inner, destroy, err := inner(config, resourcePrefix, cacheKeyFunc, newFunc, newListFunc, withTenantAttr(getAttrsFunc), triggers, indexers)
		if err != nil {
			return nil, destroy, err
		}
		s.Interface = inner
		o.Joints.add(config.GroupResource, s)
		return s, destroy, nil
	}
}

// store is the tenant-keyed view of one resource's storage.
type store struct {
	storage.Interface
	prefix       string
	resource     schema.GroupResource
	maxListItems int64
	shown        Shown
	// meter is told of every write of a project's objects (nil for a
	// resource not metered); codec encodes them as storage does, to measure them.
	meter Meter
	codec runtime.Codec
	// joints stores companions with a create; pathPrefix, transformer and
	// decoder are the etcd store's, to write and answer as it does.
	joints      *Joints
	pathPrefix  string
	transformer value.Transformer
	decoder     etcd3.Decoder
	// keyFunc is an object's key, with its tenant segment; newList makes an
	// empty list of the resource.
	keyFunc func(runtime.Object) (string, error)
	newFunc func() runtime.Object
	newList func() runtime.Object
}

// segmentOf returns the tenant segment an object is stored under, read from the
// server-owned annotations.
func segmentOf(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return tenancy.PlatformSegment
	}
	return tenancy.SegmentOf(m.GetAnnotations())
}

func withTenantAttr(getAttrs storage.AttrFunc) storage.AttrFunc {
	if getAttrs == nil {
		getAttrs = storage.DefaultNamespaceScopedAttr
	}
	return func(obj runtime.Object) (labels.Set, fields.Set, error) {
		l, f, err := getAttrs(obj)
		if err != nil {
			return l, f, err
		}
		if f == nil {
			f = fields.Set{}
		}
		f[TenantField] = segmentOf(obj)
		return l, f, nil
	}
}

// withSegment inserts a tenant segment into a key built by the registry.
func (s *store) withSegment(key, segment string) (string, error) {
	rest, ok := strings.CutPrefix(key, s.prefix)
	if !ok || (rest != "" && rest[0] != '/') {
		return "", fmt.Errorf("key %q is outside resource prefix %q", key, s.prefix)
	}
	return s.prefix + "/" + segment + rest, nil
}

// key rewrites key for the tenant of ctx. The all-projects view may only list
// and watch, which callers check with readKey.
func (s *store) key(ctx context.Context, key string) (string, error) {
	t := tenancy.From(ctx)
	if t.Kind == tenancy.AllProjects {
		return "", apierrors.NewMethodNotSupported(s.resource, "write or get in the all-projects view")
	}
	return s.withSegment(key, t.KeySegment())
}

// writeKey is key for writes that may create an object. A project the router
// has not resolved has no storage to write to.
func (s *store) writeKey(ctx context.Context, key string) (string, error) {
	if t := tenancy.From(ctx); t.IsProject() && t.ID == "" {
		return "", apierrors.NewNotFound(schema.GroupResource{Group: "resourcemanager.miloapis.com", Resource: "projects"}, t.Name)
	}
	return s.key(ctx, key)
}

// readKey rewrites the key of a list or watch and narrows its predicate: to the
// tenant's watcher index for one tenant, to everything but the platform for all projects.
func (s *store) readKey(ctx context.Context, key string, opts storage.ListOptions) (string, storage.ListOptions, error) {
	t := tenancy.From(ctx)
	p := opts.Predicate
	p.GetAttrs = withTenantAttr(p.GetAttrs)
	if t.Kind == tenancy.AllProjects {
		if key != s.prefix {
			return "", opts, apierrors.NewBadRequest("the all-projects view lists and watches across all namespaces only")
		}
		p.Field = andSelector(p.Field, fields.OneTermNotEqualSelector(TenantField, tenancy.PlatformSegment))
		opts.Predicate = p
		return key, opts, nil
	}
	k, err := s.withSegment(key, t.KeySegment())
	if err != nil {
		return "", opts, err
	}
	p.Field = andSelector(p.Field, fields.OneTermEqualSelector(TenantField, t.KeySegment()))
	p.IndexFields = append(append([]string(nil), p.IndexFields...), TenantField)
	opts.Predicate = p
	return k, opts, nil
}

func andSelector(a, b fields.Selector) fields.Selector {
	if a == nil || a.Empty() {
		return b
	}
	return fields.AndSelectors(a, b)
}

// stamp makes the object's tenant annotation say what ctx says, whatever the client sent.
func stamp(ctx context.Context, obj runtime.Object) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	tenancy.Stamp(m, tenancy.From(ctx))
	return nil
}

func (s *store) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	k, err := s.writeKey(ctx, key)
	if err != nil {
		return err
	}
	if err := stamp(ctx, obj); err != nil {
		return err
	}
	w, err := s.begin(ctx, false)
	if err != nil {
		return err
	}
	if w != nil {
		return s.meteredCreate(ctx, w, k, obj, out, ttl)
	}
	return s.create(ctx, k, obj, out, ttl, nil)
}

// create stores obj at k (its tenant's key), with the companions the
// request's Joint holds for it; usage, if not nil, guards its project's
// usage tally, which the create moves too. Where a create in a project
// requires the project to live, it is always a joint create: upstream's
// transaction has no room for the condition. Objects that expire (Events)
// are upstream's to store (their lease is its), and do not require it:
// one stored in a purged project is gone with its lease.
func (s *store) create(ctx context.Context, k string, obj, out runtime.Object, ttl uint64, usage TallyGuard) error {
	if s.joints.reaches(s.resource) {
		j := JointFrom(ctx)
		companions, guard, err := j.take(obj)
		if err != nil {
			return err
		}
		if companions == nil && guard == nil {
			j = nil // nothing held for this object: no release to make
		}
		guard = bothGuards(guard, usage)
		if companions != nil || guard != nil || (ttl == 0 && (s.livesKey(ctx) != "" || s.createdLives(obj) != nil)) {
			if ttl == 0 {
				return s.jointCreate(ctx, k, obj, out, companions, j, guard)
			}
			if err := s.companionsFirst(ctx, companions, j, guard); err != nil {
				return err
			}
		}
	}
	return s.Interface.Create(ctx, k, obj, out, ttl)
}

func (s *store) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	k, err := s.key(ctx, key)
	if err != nil {
		return err
	}
	if of := s.joints.talliesOf(s.resource); of != nil && !opts.IgnoreStoreReadError {
		// Platform objects (quota claims): never metered. An object that
		// cannot be read (the unsafe deletion of a corrupt one) is deleted
		// as upstream does, its tallies left as they are.
		return s.talliedDelete(ctx, k, out, preconditions, validateDeletion, func(obj runtime.Object, _ int64) ([]Tally, string) { return of(obj) }, nil)
	}
	// A delete only frees: it never waits for the project's usage to be
	// read, so a project can always be cleaned up.
	w, err := s.begin(ctx, true)
	if err != nil {
		return err
	}
	if w == nil {
		return s.Interface.Delete(ctx, k, out, preconditions, validateDeletion, cachedExistingObject, opts)
	}
	stored := false
	defer func() { w.End(stored) }()
	if tw, tally := s.objectsTally(w); tally != "" && !opts.IgnoreStoreReadError {
		err = s.meteredDelete(ctx, tw, tally, k, out, preconditions, validateDeletion)
	} else {
		err = s.Interface.Delete(ctx, k, out, preconditions, validateDeletion, cachedExistingObject, opts)
	}
	if err != nil {
		return err
	}
	var size int64
	if w.Sizes() {
		size = s.storedSize(out)
	}
	_ = w.Charge(-1, -size, false) // a release is never refused
	stored = true
	return nil
}

func (s *store) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	asked := opts
	k, opts, err := s.readKey(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	if s.narrowed(ctx) {
		return s.watchShown(ctx, k, opts, asked, s.shown.ProjectsShown(s.resource))
	}
	return s.Interface.Watch(ctx, k, opts)
}

func (s *store) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	k, err := s.key(ctx, key)
	if err != nil {
		return err
	}
	return s.Interface.Get(ctx, k, opts, objPtr)
}

func (s *store) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	k, opts, err := s.readKey(ctx, key, opts)
	if err != nil {
		return err
	}
	if shown := s.projectsShown(ctx); shown != nil {
		return s.shownList(ctx, k, opts, listObj, shown)
	}
	if s.maxListItems > 0 && listBounded(ctx) {
		return s.boundedList(ctx, k, opts, listObj)
	}
	return s.Interface.GetList(ctx, k, opts, listObj)
}

func (s *store) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	k, err := s.writeKey(ctx, key)
	if err != nil {
		return err
	}
	if tallied, err := s.usageTallied(ctx, ignoreNotFound); err != nil {
		return err
	} else if tallied {
		return s.talliedUpdate(ctx, k, destination, ignoreNotFound, preconditions, tryUpdate, nil)
	}
	// Each attempt is metered from its update on, and a retried attempt
	// first gives back what the last one took and lets go of the project:
	// the admission an attempt runs (which may itself write in the
	// project) never runs while the write holds it.
	var w MeteredWrite
	end := func(stored bool) {
		if w != nil {
			w.End(stored)
			w = nil
		}
	}
	defer end(false)
	stamped := func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		if res.ResourceVersion == 0 && s.livesKey(ctx) != "" {
			// It creates: in a transaction that requires the project,
			// with what this attempt's update made.
			out, ttl, err := tryUpdate(input, res)
			if err != nil {
				return out, ttl, err
			}
			return nil, nil, &createsInProject{out: out, ttl: ttl}
		}
		end(false)
		out, ttl, err := tryUpdate(input, res)
		if err != nil {
			return out, ttl, err
		}
		if err := stamp(ctx, out); err != nil {
			return out, ttl, err
		}
		if w, err = s.begin(ctx, false); err != nil {
			return nil, nil, err
		}
		if w != nil {
			// No revision: the update creates the object (an apply or a PUT that may create).
			var objects, bytes int64
			var old runtime.Object
			if res.ResourceVersion == 0 {
				objects = 1
			} else {
				old = input
			}
			if s.updateMovesTallies(w, objects == 1) {
				// The project's usage came to be counted in storage since
				// the update began (its grant arrived): the update is
				// made again the way that moves the counts.
				return nil, nil, errCountedSince
			}
			if w.Sizes() {
				bytes = s.storedSize(out)
				if old != nil {
					bytes -= s.storedSize(old)
				}
			}
			if err := w.Charge(objects, bytes, refusable(ctx, old, out)); err != nil {
				return nil, nil, s.refused(key, err)
			}
		}
		return out, ttl, nil
	}
	err = s.Interface.GuaranteedUpdate(ctx, k, destination, ignoreNotFound, preconditions, stamped, cachedExistingObject)
	var creates *createsInProject
	if errors.Is(err, errCountedSince) || errors.As(err, &creates) {
		end(false)
		return s.talliedUpdate(ctx, k, destination, ignoreNotFound, preconditions, tryUpdate, creates)
	}
	end(err == nil)
	return err
}
