package tenantadmission

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"

	"go.miloapis.com/milo/pkg/tenancy"
)

// TenantAnnotationPlugin is the name of the admission plugin that stamps the
// tenant annotation before any other plugin runs.
const TenantAnnotationPlugin = "TenantAnnotation"

// RegisterTenantAnnotation registers the plugin. It must run first of the
// mutating plugins so that webhooks and admission policies — which are
// platform-wide — see which project an object belongs to, and cannot be fooled by
// an annotation the client wrote. The storage layer stamps it again on write.
func RegisterTenantAnnotation(plugins *admission.Plugins) {
	plugins.Register(TenantAnnotationPlugin, func(io.Reader) (admission.Interface, error) {
		return &tenantAnnotation{Handler: admission.NewHandler(admission.Create, admission.Update)}, nil
	})
}

// reviewGroups hold request-only kinds (access and token reviews), which are never
// stored and must keep empty metadata.
var reviewGroups = sets.New("authorization.k8s.io", "authentication.k8s.io")

type tenantAnnotation struct {
	*admission.Handler
}

var _ admission.MutationInterface = &tenantAnnotation{}

func (p *tenantAnnotation) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	obj := a.GetObject()
	if obj == nil || a.GetSubresource() != "" || reviewGroups.Has(a.GetResource().Group) {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil // not an object with metadata, e.g. a review request
	}
	t := tenancy.From(ctx)
	if t.Kind == tenancy.Organization && tenancy.IsOrganizationScoped(a.GetResource().GroupResource()) {
		// A Folder or Project made in an organization's context belongs to it.
		labels := m.GetLabels()
		if owner, ok := labels[tenancy.OrganizationLabel]; ok && owner != t.Name {
			return admission.NewForbidden(a, fmt.Errorf("label %s=%s names another organization than %q", tenancy.OrganizationLabel, owner, t.Name))
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[tenancy.OrganizationLabel] = t.Name
		m.SetLabels(labels)
	}
	tenancy.Stamp(m, t)
	return nil
}
