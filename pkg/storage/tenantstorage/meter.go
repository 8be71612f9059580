package tenantstorage

import (
	"context"
	"maps"
	"path"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Meter is told of every write of a project's objects and may refuse one:
// what a project stores — objects and bytes — is what a provider's quota on
// the project limits. The storage layer is the one place every write of
// every kind passes, the project's own CRDs' included, so nothing written
// escapes it.
type Meter interface {
	// Begin starts a write to t's objects; it returns nil when nothing
	// meters t (no limit names it), which costs the write nothing more.
	// release says the write only frees (a delete): it must not wait for
	// the project's usage to be read.
	Begin(ctx context.Context, t tenancy.Tenant, release bool) (MeteredWrite, error)
}

// MeteredWrite is one write in progress. End must be called once.
type MeteredWrite interface {
	// Sizes reports whether the project's stored bytes are metered, so the
	// write must say how many it adds.
	Sizes() bool
	// Charge sets what the write adds: objects and bytes, negative for what
	// it frees. Growth the project's limit cannot hold is refused with the
	// reason unless refusable is false. Each call replaces the last: a
	// retried update charges its last attempt.
	Charge(objects, bytes int64, refusable bool) error
	// End finishes the write; stored says it took effect, else its charge is undone.
	End(stored bool)
}

// unmetered are the resources whose objects are not a project's to count:
// those that expire on their own (an etcd lease), unseen by this layer,
// and the usage tallies.
var unmetered = func() map[schema.GroupResource]bool {
	m := maps.Clone(expiring)
	m[usageResource] = true
	return m
}()

// begin starts a metered write for the tenant of ctx, or returns nil.
func (s *store) begin(ctx context.Context, release bool) (MeteredWrite, error) {
	if s.meter == nil {
		return nil, nil
	}
	t := tenancy.From(ctx)
	if !t.IsProject() || t.ID == "" {
		return nil, nil
	}
	w, err := s.meter.Begin(ctx, t, release)
	if tw, ok := w.(TalliedWrite); ok && !s.joints.reaches(s.resource) {
		tw.Untallied()
	}
	return w, err
}

// refused makes a charge's refusal the request's answer.
func (s *store) refused(key string, err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsServiceUnavailable(err) {
		return err
	}
	return apierrors.NewForbidden(s.resource, path.Base(key), err)
}

// refusable reports whether a write of obj (old before it, nil for a
// create) that grows a project may be refused: the server's own writes
// (its controllers finishing what the project asked for, a namespace's
// default ServiceAccount and CA ConfigMap, quota admission's status
// writes) are charged but never refused, and neither is the update that
// starts an object's deletion, so a project at its limit can always be
// cleaned up.
func refusable(ctx context.Context, old, obj runtime.Object) bool {
	if u, ok := request.UserFrom(ctx); ok && u.GetName() == user.APIServerUser {
		return false
	}
	if isServerWrite(ctx) {
		return false
	}
	if old != nil && deleting(obj) && !deleting(old) {
		return false
	}
	return true
}

func deleting(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && m.GetDeletionTimestamp() != nil
}

type serverWriteKey struct{}

// ServerWrite marks ctx as a write the server makes in a project on its
// own account (quota admission's usage in a ResourceQuota's status): it is
// charged to the project but never refused.
func ServerWrite(ctx context.Context) context.Context {
	return context.WithValue(ctx, serverWriteKey{}, true)
}

func isServerWrite(ctx context.Context) bool {
	v, _ := ctx.Value(serverWriteKey{}).(bool)
	return v
}

// storedSize is how many bytes obj takes in storage: its encoding without
// a resource version (which etcd keeps as the key's revision, not in the
// value), as the etcd store encodes it.
func (s *store) storedSize(obj runtime.Object) int64 {
	if s.codec == nil || obj == nil {
		return 0
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	rv := m.GetResourceVersion()
	if err := versioner.PrepareObjectForStorage(obj); err != nil {
		return 0
	}
	data, err := runtime.Encode(s.codec, obj)
	if rv != "" {
		m.SetResourceVersion(rv)
	}
	if err != nil {
		klog.V(2).InfoS("Measuring an object's size", "resource", s.resource, "err", err)
		return 0
	}
	return int64(len(data))
}

var versioner = storage.APIObjectVersioner{}

// meteredCreate stores obj, charged one object and its bytes.
func (s *store) meteredCreate(ctx context.Context, w MeteredWrite, key string, obj, out runtime.Object, ttl uint64) (err error) {
	stored := false
	defer func() { w.End(stored) }()
	tw, tally := s.objectsTally(w)
	var size int64
	if w.Sizes() || (tally != "" && tw.BytesTally() != "") {
		size = s.storedSize(obj)
	}
	if err := w.Charge(1, size, refusable(ctx, nil, obj)); err != nil {
		return s.refused(key, err)
	}
	var usage TallyGuard
	if tally != "" {
		usage = tw.Guard(1, size, refusable(ctx, nil, obj))
	}
	err = s.create(ctx, key, obj, out, ttl, usage)
	stored = err == nil
	return s.asRefusal(key, err)
}
