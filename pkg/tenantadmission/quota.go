package tenantadmission

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	quotageneric "k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"

	"go.miloapis.com/milo/pkg/tenancy"
)

// ObjectCounter counts the objects of one resource in one namespace of the project with the given storage id.
type ObjectCounter func(ctx context.Context, resource schema.GroupResource, projectID, namespace string) (int64, error)

// Quotas gives project quota admission what it reads: the ResourceQuota storage
// (served from the shared watch cache) and an object counter (etcd key counts).
type Quotas struct {
	lister  atomic.Pointer[rest.Lister]
	counter ObjectCounter
}

// NewQuotas returns quota state that counts objects with counter.
func NewQuotas(counter ObjectCounter) *Quotas { return &Quotas{counter: counter} }

// Set installs the ResourceQuota storage once the server has built it.
func (q *Quotas) Set(l rest.Lister) { q.lister.Store(&l) }

// legacyCountNames are the pre-"count/" quota names of core resources.
var legacyCountNames = sets.New("configmaps", "secrets", "services", "persistentvolumeclaims", "replicationcontrollers", "resourcequotas")

// projectQuota enforces object-count quotas (count/<resource>[.<group>], and the
// legacy core names such as "configmaps") of a project's ResourceQuotas on
// creates in that project. Compute-resource quotas concern pods, which Milo does
// not serve; quotas with scopes are ignored for the same reason.
//
// Usage is counted at admission time from etcd, not kept in the quota's status,
// so two creates racing for the last unit can both pass.
type projectQuota struct {
	quotas *Quotas
}

func (p *projectQuota) Handles(op admission.Operation) bool { return op == admission.Create }

func (p *projectQuota) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetNamespace() == "" || a.GetSubresource() != "" || p.quotas == nil {
		return nil
	}
	gr := a.GetResource().GroupResource()
	names := []corev1.ResourceName{quotageneric.ObjectCountQuotaResourceNameFor(gr)}
	if gr.Group == "" && legacyCountNames.Has(gr.Resource) {
		names = append(names, corev1.ResourceName(gr.Resource))
	}
	quotas, err := p.list(ctx, a.GetNamespace())
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading resource quotas: %w", err))
	}
	var used int64 = -1
	for _, q := range quotas {
		if len(q.Spec.Scopes) > 0 || q.Spec.ScopeSelector != nil {
			continue
		}
		for _, name := range names {
			hard, ok := q.Spec.Hard[api.ResourceName(name)]
			if !ok {
				continue
			}
			if used < 0 {
				if used, err = p.quotas.counter(ctx, gr, tenancy.From(ctx).KeySegment(), a.GetNamespace()); err != nil {
					return apierrors.NewInternalError(err)
				}
			}
			if used+1 > hard.Value() {
				return admission.NewForbidden(a, fmt.Errorf("exceeded quota: %s, requested: %s=1, used: %s=%d, limited: %s=%s",
					q.Name, name, name, used, name, hard.String()))
			}
		}
	}
	return nil
}

func (p *projectQuota) list(ctx context.Context, namespace string) ([]*api.ResourceQuota, error) {
	l := p.quotas.lister.Load()
	if l == nil {
		return nil, fmt.Errorf("resource quota storage is not ready")
	}
	obj, err := (*l).List(genericapirequest.WithNamespace(ctx, namespace), &metainternalversion.ListOptions{ResourceVersion: "0"})
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
