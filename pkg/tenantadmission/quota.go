package tenantadmission

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	quotageneric "k8s.io/apiserver/pkg/quota/v1/generic"
	api "k8s.io/kubernetes/pkg/apis/core"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/tenantstate"
)

// ObjectCounter counts the objects of one resource in one namespace of the project with the given storage id.
type ObjectCounter func(ctx context.Context, resource schema.GroupResource, projectID, namespace string) (int64, error)

// ObjectExists reports whether one object exists in the project with the given storage id.
type ObjectExists func(ctx context.Context, resource schema.GroupResource, projectID, namespace, name string) (bool, error)

// Quotas gives project quota admission what it reads and writes: the
// ResourceQuota storage (reads served from the shared watch cache), its
// status storage (charges), and object counts and lookups in etcd.
type Quotas struct {
	tenant  *tenantstate.Reader
	counter ObjectCounter
	exists  ObjectExists
}

// NewQuotas returns quota state that reads ResourceQuotas through tenant,
// counts objects with counter and looks them up with exists.
func NewQuotas(tenant *tenantstate.Reader, counter ObjectCounter, exists ObjectExists) *Quotas {
	return &Quotas{tenant: tenant, counter: counter, exists: exists}
}

var (
	quotasResource      = api.Resource("resourcequotas")
	quotaStatusResource = api.Resource("resourcequotas/status")
)

// legacyCountNames are the pre-"count/" quota names of core resources.
var legacyCountNames = sets.New("configmaps", "secrets", "services", "persistentvolumeclaims", "replicationcontrollers", "resourcequotas")

// projectQuota enforces object-count quotas (count/<resource>[.<group>], and the
// legacy core names such as "configmaps") of a project's ResourceQuotas on
// creates in that project. Compute-resource quotas concern pods, which Milo does
// not serve; quotas with scopes are ignored for the same reason.
//
// Usage is the number of objects stored (counted in etcd) plus the creates
// admitted but not stored yet: each admitted create reserves a unit on the
// ResourceQuota itself (ReservationsAnnotation), written conditionally on the
// quota's resourceVersion, so two creates racing for the last unit are
// serialized by the quota and only one passes. A reservation counts until its
// object is stored, or for ReservationTTL at most (a create that failed after
// admission). The same write keeps status.used current for creates; the
// resource quota controller recomputes it on a resync and on every spec change.
type projectQuota struct {
	quotas *Quotas
	now    func() time.Time
}

// ReservationsAnnotation, on a ResourceQuota in a project, holds the units
// admitted creates reserved and have not been seen stored yet.
const ReservationsAnnotation = "quota.miloapis.com/reservations"

// ReservationTTL bounds how long a reservation counts when its object never appears.
const ReservationTTL = 30 * time.Second

// maxReservations bounds the reservations one quota holds: creates in flight
// at once, each looked up on every charge. Beyond it a create is asked to retry.
const maxReservations = 64

// reservation is one admitted create not yet seen stored.
type reservation struct {
	Resource string    `json:"resource"`
	Name     string    `json:"name"`
	Expires  time.Time `json:"expires"`
}

func (p *projectQuota) Handles(op admission.Operation) bool {
	return op == admission.Create || op == admission.Update
}

var resourceQuotas = schema.GroupResource{Resource: "resourcequotas"}

// Admit keeps ReservationsAnnotation the server's: clients can neither set
// nor change it (admission's own charges write through the status storage
// directly). A tenant who could fill it would make every create look each
// entry up.
func (p *projectQuota) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != resourceQuotas {
		return nil
	}
	q, ok := a.GetObject().(*api.ResourceQuota)
	if !ok {
		return nil
	}
	want := ""
	if old, ok := a.GetOldObject().(*api.ResourceQuota); ok && old != nil {
		want = old.Annotations[ReservationsAnnotation]
	}
	if q.Annotations[ReservationsAnnotation] == want {
		return nil
	}
	if want == "" {
		delete(q.Annotations, ReservationsAnnotation)
	} else {
		if q.Annotations == nil {
			q.Annotations = map[string]string{}
		}
		q.Annotations[ReservationsAnnotation] = want
	}
	return nil
}

func (p *projectQuota) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetOperation() != admission.Create || a.GetNamespace() == "" || a.GetSubresource() != "" || p.quotas == nil {
		return nil
	}
	gr := a.GetResource().GroupResource()
	names := []api.ResourceName{api.ResourceName(quotageneric.ObjectCountQuotaResourceNameFor(gr))}
	if gr.Group == "" && legacyCountNames.Has(gr.Resource) {
		names = append(names, api.ResourceName(gr.Resource))
	}
	quotas, err := p.list(ctx, a.GetNamespace())
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading resource quotas: %w", err))
	}
	for _, q := range quotas {
		if len(q.Spec.Scopes) > 0 || q.Spec.ScopeSelector != nil || !limitsAny(q, names) {
			continue
		}
		if err := p.charge(ctx, a, q.Name, names); err != nil {
			return err
		}
	}
	return nil
}

func limitsAny(q *api.ResourceQuota, names []api.ResourceName) bool {
	for _, n := range names {
		if _, ok := q.Spec.Hard[n]; ok {
			return true
		}
	}
	return false
}

// charge reserves one unit of the names on quota name for the object a
// creates, or refuses it.
func (p *projectQuota) charge(ctx context.Context, a admission.Attributes, name string, names []api.ResourceName) error {
	gr := a.GetResource().GroupResource()
	for range 20 {
		obj, err := p.quotas.tenant.Get(ctx, quotasResource, a.GetNamespace(), name, &metav1.GetOptions{}) // from etcd: the revision the write is conditional on
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("reading resource quota %s: %w", name, err))
		}
		q, ok := obj.(*api.ResourceQuota)
		if !ok {
			return apierrors.NewInternalError(fmt.Errorf("resource quota storage returned %T", obj))
		}
		// Reservations first, then the count: an object stored in between is
		// counted twice (refusing a create that might have passed), never
		// missed (admitting one too many).
		pending, err := p.pending(ctx, q, gr)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		used, err := p.quotas.counter(ctx, gr, tenancy.From(ctx).KeySegment(), a.GetNamespace())
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		for _, r := range pending {
			if r.Resource == gr.String() {
				used++
			}
		}
		updated := q.DeepCopy()
		if updated.Status.Used == nil {
			updated.Status.Used = api.ResourceList{}
		}
		updated.Status.Hard = q.Spec.Hard.DeepCopy()
		for _, n := range names {
			hard, ok := q.Spec.Hard[n]
			if !ok {
				continue
			}
			if used+1 > hard.Value() {
				return admission.NewForbidden(a, fmt.Errorf("exceeded quota: %s, requested: %s=1, used: %s=%d, limited: %s=%s",
					q.Name, n, n, used, n, hard.String()))
			}
			updated.Status.Used[n] = *resource.NewQuantity(used+1, resource.DecimalSI)
		}
		if a.IsDryRun() {
			return nil // checked, not charged: nothing will be stored
		}
		if len(pending) >= maxReservations {
			return apierrors.NewTooManyRequests(fmt.Sprintf("too many creates are being admitted against resource quota %s at once", name), 1)
		}
		pending = append(pending, reservation{Resource: gr.String(), Name: a.GetName(), Expires: p.now().Add(ReservationTTL)})
		raw, err := json.Marshal(pending)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if updated.Annotations == nil {
			updated.Annotations = map[string]string{}
		}
		updated.Annotations[ReservationsAnnotation] = string(raw)
		_, err = p.quotas.tenant.Update(ctx, quotaStatusResource, a.GetNamespace(), name, updated)
		switch {
		case apierrors.IsConflict(err):
			continue // another create charged the quota meanwhile: count again
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return apierrors.NewInternalError(fmt.Errorf("charging resource quota %s: %w", name, err))
		}
		return nil
	}
	return apierrors.NewConflict(a.GetResource().GroupResource(), a.GetName(), fmt.Errorf("resource quota %s changed too often while this create was admitted; retry", name))
}

// pending returns a quota's reservations that still count: not expired, and
// (for this resource) whose object is not stored yet. The others are dropped
// when the quota is next written.
func (p *projectQuota) pending(ctx context.Context, q *api.ResourceQuota, gr schema.GroupResource) ([]reservation, error) {
	raw := q.Annotations[ReservationsAnnotation]
	if raw == "" {
		return nil, nil
	}
	var all []reservation
	if err := json.Unmarshal([]byte(raw), &all); err != nil {
		return nil, nil // not ours to trust: a user edited it
	}
	now := p.now()
	var out []reservation
	if len(all) > maxReservations {
		all = all[len(all)-maxReservations:]
	}
	for _, r := range all {
		if !r.Expires.After(now) || r.Expires.After(now.Add(ReservationTTL)) {
			continue
		}
		if r.Resource == gr.String() && r.Name != "" {
			stored, err := p.quotas.exists(ctx, gr, tenancy.From(ctx).KeySegment(), q.Namespace, r.Name)
			if err != nil {
				return nil, err
			}
			if stored {
				continue
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func (p *projectQuota) list(ctx context.Context, namespace string) ([]*api.ResourceQuota, error) {
	obj, err := p.quotas.tenant.List(ctx, quotasResource, namespace)
	if err != nil {
		return nil, err
	}
	var out []*api.ResourceQuota
	err = meta.EachListItem(obj, func(o runtime.Object) error {
		if q, ok := o.(*api.ResourceQuota); ok {
			out = append(out, q)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].Name, out[j].Name) < 0 })
	return out, err
}
