// Package tenantstate is the one path by which the parts of the server that
// decide about a request — tenant-aware admission, project RBAC, the project
// service account token authenticator — read the objects of the tenant the
// request addresses.
//
// They read through the server's own REST storages: the tenant in the request
// context selects the keys (package tenantstorage), the shared watch cache
// serves the reads, and nothing is cached per tenant. A Reader is made with the
// server's configuration and handed to each of those parts when it is
// constructed; the server installs its storages into it while it builds its
// APIs, before it serves any request. Reads through a Reader are the server's
// own: the bounds on what a tenant's request may list do not apply to them.
//
// What a Reader returns may be the watch cache's own objects, whose maps
// are shared (a project's objects share one annotations map: see
// tenantstorage.TenancyMaps): read them only, or DeepCopy before changing
// anything.
package tenantstate

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"go.miloapis.com/milo/pkg/storage/tenantstorage"
)

// Reader reads the objects of the tenant in a request's context.
type Reader struct {
	mu       sync.Mutex // serializes Install
	storages atomic.Pointer[map[schema.GroupResource]rest.Storage]
}

// New returns a Reader with no storage installed yet.
func New() *Reader { return &Reader{} }

// Install records the storages the server built for one API group's version,
// by resource ("resource/subresource" for a subresource).
func (r *Reader) Install(group string, storages map[string]rest.Storage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := map[schema.GroupResource]rest.Storage{}
	if cur := r.storages.Load(); cur != nil {
		maps.Copy(next, *cur)
	}
	for resource, s := range storages {
		next[schema.GroupResource{Group: group, Resource: resource}] = s
	}
	r.storages.Store(&next)
}

func (r *Reader) storage(gr schema.GroupResource) (rest.Storage, error) {
	if m := r.storages.Load(); m != nil {
		if s, ok := (*m)[gr]; ok {
			return s, nil
		}
	}
	return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("the storage of %s is not ready", gr))
}

// own marks ctx as the server's own read of namespace.
func own(ctx context.Context, namespace string) context.Context {
	return tenantstorage.ServerRead(genericapirequest.WithNamespace(ctx, namespace))
}

// FromCache asks for what the watch cache holds: reads made on every request.
var FromCache = &metav1.GetOptions{ResourceVersion: "0"}

// Get reads one object (namespace "" for a cluster-scoped one) with opts:
// FromCache, or &metav1.GetOptions{} to read etcd.
func (r *Reader) Get(ctx context.Context, gr schema.GroupResource, namespace, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	s, err := r.storage(gr)
	if err != nil {
		return nil, err
	}
	g, ok := s.(rest.Getter)
	if !ok {
		return nil, fmt.Errorf("the storage of %s cannot get", gr)
	}
	return g.Get(own(ctx, namespace), name, opts)
}

// List reads every object of one namespace ("" for cluster-scoped objects,
// or every namespace) from the watch cache.
func (r *Reader) List(ctx context.Context, gr schema.GroupResource, namespace string) (runtime.Object, error) {
	s, err := r.storage(gr)
	if err != nil {
		return nil, err
	}
	l, ok := s.(rest.Lister)
	if !ok {
		return nil, fmt.Errorf("the storage of %s cannot list", gr)
	}
	return l.List(own(ctx, namespace), &metainternalversion.ListOptions{ResourceVersion: "0"})
}

// Update writes obj through the storage of gr (a status subresource: quota
// admission's charges), conditional on obj's resourceVersion.
func (r *Reader) Update(ctx context.Context, gr schema.GroupResource, namespace, name string, obj runtime.Object) (runtime.Object, error) {
	s, err := r.storage(gr)
	if err != nil {
		return nil, err
	}
	u, ok := s.(rest.Updater)
	if !ok {
		return nil, fmt.Errorf("the storage of %s cannot update", gr)
	}
	// The server's own write: charged to the project's stored bytes, never refused for them.
	out, _, err := u.Update(tenantstorage.ServerWrite(own(ctx, namespace)), name, rest.DefaultUpdatedObjectInfo(obj), nil, nil, false, &metav1.UpdateOptions{})
	return out, err
}
