package projectcrds

import (
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"go.miloapis.com/milo/pkg/tenancy"
)

// PluginName is the admission plugin that keeps projects' CRDs to what a
// project may define. It must stay enabled: it is the only check between a
// tenant and the server calling a URL of the tenant's choosing.
const PluginName = "ProjectCustomResourceDefinitions"

// Rules are the operator's settings for project-local CRDs.
type Rules struct {
	// Enabled lets projects define CRDs (--project-crds).
	Enabled bool
	// ConversionWebhookURLPrefixes are the URL prefixes a project CRD's
	// conversion webhook may call (--project-crd-conversion-webhook-prefixes);
	// none by default.
	ConversionWebhookURLPrefixes []string
}

// Register registers the plugin; it reads rules when the server builds it,
// after the flags are parsed.
func Register(plugins *admission.Plugins, rules *Rules) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return newPlugin(*rules), nil
	})
}

func newPlugin(rules Rules) *plugin {
	return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update), rules: rules}
}

type plugin struct {
	*admission.Handler
	rules Rules
}

var _ admission.ValidationInterface = &plugin{}

// Validate refuses, in a project, a CRD the project may not define: any CRD
// when the server serves none, one in a group Milo reserves, and one whose
// conversion webhook the operator has not allowed.
func (p *plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !tenancy.From(ctx).IsProject() || a.GetResource().GroupResource() != tenancy.CRDs || a.GetSubresource() != "" {
		return nil
	}
	crd, ok := a.GetObject().(*apiextensions.CustomResourceDefinition)
	if !ok {
		return nil
	}
	if !p.rules.Enabled {
		return admission.NewForbidden(a, fmt.Errorf("this server does not serve CustomResourceDefinitions defined in projects (its operator enables them with --project-crds)"))
	}
	errs := ReservedGroup(crd.Spec.Group, field.NewPath("spec", "group"))
	errs = append(errs, p.conversion(crd.Spec.Conversion, field.NewPath("spec", "conversion"))...)
	if len(errs) > 0 {
		return apierrors.NewInvalid(apiextensions.Kind("CustomResourceDefinition"), crd.Name, errs)
	}
	return nil
}

// reservedSuffixes are the domains whose groups only the platform defines:
// Milo's own, so that no project kind passes for one of Milo's. Kubernetes'
// groups follow upstream's rule (an approval annotation), so that projects
// can install the community's CRDs (Gateway API, Cluster API); a group the
// platform serves is refused its names by the naming controller.
var reservedSuffixes = []string{"miloapis.com"}

// ReservedGroup refuses an API group a project may not define kinds in.
func ReservedGroup(group string, path *field.Path) field.ErrorList {
	for _, s := range reservedSuffixes {
		if group == s || strings.HasSuffix(group, "."+s) {
			return field.ErrorList{field.Forbidden(path, fmt.Sprintf("the groups of %s and its subdomains are reserved for the platform; a project defines its kinds in a group of its own domain", s))}
		}
	}
	return nil
}

// conversion refuses a conversion webhook unless the operator allows its URL:
// the server would call whatever the CRD names, from inside the provider's
// network. A webhook reached through a Service is refused whatever the
// prefixes: a project has no Services of its own to name, only the platform's.
func (p *plugin) conversion(c *apiextensions.CustomResourceConversion, path *field.Path) field.ErrorList {
	if c == nil || c.Strategy != apiextensions.WebhookConverter || c.WebhookClientConfig == nil {
		return nil
	}
	cc, path := c.WebhookClientConfig, path.Child("webhook", "clientConfig")
	if cc.Service != nil {
		return field.ErrorList{field.Forbidden(path.Child("service"), "a project CRD's conversion webhook cannot be reached through a Service; name a URL the server's operator allows")}
	}
	if cc.URL != nil {
		for _, prefix := range p.rules.ConversionWebhookURLPrefixes {
			if prefix != "" && strings.HasPrefix(*cc.URL, prefix) {
				return nil
			}
		}
	}
	allowed := "this server allows none"
	if len(p.rules.ConversionWebhookURLPrefixes) > 0 {
		allowed = "this server allows URLs starting with " + strings.Join(p.rules.ConversionWebhookURLPrefixes, ", ")
	}
	return field.ErrorList{field.Forbidden(path.Child("url"), "a project CRD's conversion webhook would make the server call a URL the project chooses; "+allowed+
		" (the operator's --project-crd-conversion-webhook-prefixes); use conversion strategy None")}
}
