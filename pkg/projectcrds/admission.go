package projectcrds

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path"
	"slices"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"go.miloapis.com/milo/pkg/registry"
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
	// MaxPerProject is the most CRDs one project defines (--max-project-crds).
	MaxPerProject int
	// ReservedGroups are API groups, each with its subdomains, that only the
	// platform defines CRDs in (--project-crd-reserved-groups), beside
	// miloapis.com: the groups of CRDs the operator installs, or will, at
	// the platform, which a project holding names in first would block (409).
	ReservedGroups []string
}

// DefaultMaxPerProject is how many CRDs one project may define by default:
// more than the operators a team runs install (a few dozen each), few enough
// that one project's definitions — up to 1.5 MiB each — stay a small part of
// what the server holds.
const DefaultMaxPerProject = 200

// MaxVersions is the most versions a project's CRD lists: the server builds
// a storage for each version of a CRD it serves.
const MaxVersions = 8

// Register registers the plugin; it reads rules when the server builds it,
// after the flags are parsed, and projects' CRDs from index.
func Register(plugins *admission.Plugins, rules *Rules, index *Index) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return newPlugin(*rules, index), nil
	})
}

// BuiltInGroups are Milo's groups the server serves from typed storage: no
// CustomResourceDefinition may name them.
var BuiltInGroups = registry.GroupNames()

// builtInGroup refuses, at the platform, a CRD of a group the server serves
// itself. Such a CRD (one an earlier Milo installed, or an old manifest
// applied again) would name the same keys as the typed storage, and deleting
// it through the API would delete every object of its kinds with it: its
// creation and update are invalid, its deletion forbidden (the server retires
// such a definition from storage as it starts).
func builtInGroup(ctx context.Context, a admission.Attributes) error {
	if tenancy.From(ctx).Kind != tenancy.Platform || a.GetSubresource() != "" {
		return nil
	}
	for _, group := range BuiltInGroups {
		if a.GetOperation() == admission.Delete {
			// A CRD's name is its plural (no dots) and its group; a
			// deletecollection names none, and each CRD it deletes is
			// the old object.
			_, named, _ := strings.Cut(a.GetName(), ".")
			if old, ok := a.GetOldObject().(*apiextensions.CustomResourceDefinition); ok {
				named = old.Spec.Group
			}
			if named == group {
				return apierrors.NewForbidden(tenancy.CRDs, a.GetName(), fmt.Errorf("group %q is served by the server itself: deleting this definition through the API would delete every object of its kinds; restart the server to retire it", group))
			}
			continue
		}
		if crd, ok := a.GetObject().(*apiextensions.CustomResourceDefinition); ok && crd.Spec.Group == group {
			return apierrors.NewInvalid(apiextensions.Kind("CustomResourceDefinition"), crd.Name, field.ErrorList{field.Forbidden(field.NewPath("spec", "group"),
				fmt.Sprintf("group %q is served by the server itself, from typed storage; a CustomResourceDefinition of it would share its objects' storage", group))})
		}
	}
	return nil
}

func newPlugin(rules Rules, index *Index) *plugin {
	if index == nil {
		index = &Index{}
	}
	return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), rules: rules, index: index}
}

type plugin struct {
	*admission.Handler
	rules Rules
	index *Index
}

var _ admission.ValidationInterface = &plugin{}

// Validate refuses, in a project, a CRD the project may not define: any CRD
// when the server serves none, more than the most one project defines, one
// in a group Milo reserves, one whose conversion webhook the operator has not
// allowed; and a write of a project CRD's status by anyone but the server's
// superusers (the controllers): what names a CRD holds decides what the
// server serves. On the platform, it refuses a CRD of a group some project
// defines: a group is the platform's or projects', never both, so that their
// instances never share a key range.
func (p *plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != tenancy.CRDs {
		return nil
	}
	if err := builtInGroup(ctx, a); err != nil {
		return err
	}
	if a.GetOperation() == admission.Delete {
		return nil
	}
	crd, ok := a.GetObject().(*apiextensions.CustomResourceDefinition)
	if !ok {
		return nil
	}
	t := tenancy.From(ctx)
	switch {
	case t.Kind == tenancy.Platform:
		if a.GetOperation() == admission.Create && a.GetSubresource() == "" && p.index.definesGroup(crd.Spec.Group) {
			return apierrors.NewConflict(tenancy.CRDs, crd.Name, fmt.Errorf("projects define their own kinds in group %q; "+
				"a group is the platform's or projects', and the platform's CRDs cannot join one projects use", crd.Spec.Group))
		}
		return nil
	case !t.IsProject():
		return nil
	case a.GetSubresource() == "status":
		if !superuser(a) {
			return admission.NewForbidden(a, fmt.Errorf("the status of a project's CustomResourceDefinition is the server's to write"))
		}
		return nil
	case a.GetSubresource() != "":
		return nil
	}
	if !p.rules.Enabled {
		return admission.NewForbidden(a, fmt.Errorf("this server does not serve CustomResourceDefinitions defined in projects (its operator enables them with --project-crds)"))
	}
	// The operator's reserved groups keep new CRDs out; one a project
	// defined before its group was reserved may still be updated (a CRD's
	// group never changes).
	var operators []string
	if a.GetOperation() == admission.Create {
		operators = p.rules.ReservedGroups
	}
	errs := ReservedGroup(crd.Spec.Group, field.NewPath("spec", "group"), operators)
	if len(crd.Spec.Versions) > MaxVersions {
		// Each version of a served class is a storage of the server's.
		errs = append(errs, field.TooMany(field.NewPath("spec", "versions"), len(crd.Spec.Versions), MaxVersions))
	}
	errs = append(errs, p.conversion(crd.Spec.Conversion, field.NewPath("spec", "conversion"))...)
	if len(errs) > 0 {
		return apierrors.NewInvalid(apiextensions.Kind("CustomResourceDefinition"), crd.Name, errs)
	}
	// Counted last, so that a create this plugin refuses holds no place; a
	// dry run is counted but reserves nothing, as it stores nothing.
	if a.GetOperation() == admission.Create && p.rules.MaxPerProject > 0 &&
		!p.index.pending.reserve(t.ID, crd.Name, func() []string { return p.index.namesOf(t.ID) }, p.rules.MaxPerProject, !a.IsDryRun()) {
		return admission.NewForbidden(a, fmt.Errorf("project %s defines %d CustomResourceDefinitions (those being created included), the most one project may define", t.Name, p.rules.MaxPerProject))
	}
	return nil
}

// reservedSuffixes are the domains whose groups only the platform defines:
// Milo's own, so that no project kind passes for one of Milo's. Kubernetes'
// groups follow upstream's rule (an approval annotation), so that projects
// can install the community's CRDs (Gateway API, Cluster API); a group the
// platform serves is refused its names by the naming controller.
var reservedSuffixes = []string{"miloapis.com"}

// ReservedGroup refuses an API group a project may not define kinds in:
// Milo's, or one of the operator's (each with its subdomains).
func ReservedGroup(group string, path *field.Path, operators []string) field.ErrorList {
	for _, s := range append(slices.Clip(reservedSuffixes), operators...) {
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
	if c == nil || c.Strategy != apiextensions.WebhookConverter {
		return nil
	}
	cc, path := c.WebhookClientConfig, path.Child("webhook", "clientConfig")
	if cc != nil && cc.Service != nil {
		return field.ErrorList{field.Forbidden(path.Child("service"), "a project CRD's conversion webhook cannot be reached through a Service; name a URL the server's operator allows")}
	}
	if cc != nil && cc.URL != nil && AllowedURL(*cc.URL, p.rules.ConversionWebhookURLPrefixes) {
		return nil
	}
	allowed := "this server allows none"
	if len(p.rules.ConversionWebhookURLPrefixes) > 0 {
		allowed = "this server allows URLs starting with " + strings.Join(p.rules.ConversionWebhookURLPrefixes, ", ")
	}
	return field.ErrorList{field.Forbidden(path.Child("url"), "a project CRD's conversion webhook would make the server call a URL the project chooses; "+allowed+
		" (the operator's --project-crd-conversion-webhook-prefixes); use conversion strategy None")}
}

// AllowedURL reports whether url is under one of prefixes (https URLs whose
// paths end in '/'): the same scheme and host, exactly, and a path under the
// prefix's once cleaned — a path that climbs out with "..", written plainly or
// escaped, is under none.
func AllowedURL(raw string, prefixes []string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.Opaque != "" {
		return false
	}
	escaped := strings.ToLower(u.EscapedPath())
	if strings.Contains(escaped, "..") || strings.Contains(escaped, "%2e") || strings.Contains(escaped, "%2f") || strings.Contains(escaped, "%5c") {
		return false
	}
	for _, prefix := range prefixes {
		p, err := url.Parse(prefix)
		if err != nil || p.Path == "" {
			continue
		}
		if strings.EqualFold(u.Scheme, p.Scheme) && strings.EqualFold(u.Host, p.Host) && strings.HasPrefix(path.Clean(u.Path)+"/", p.Path) {
			return true
		}
	}
	return false
}

// superuser reports whether the request comes from the server's superusers
// (system:masters: the loopback, the admin kubeconfig, the controllers).
func superuser(a admission.Attributes) bool {
	u := a.GetUserInfo()
	return u != nil && slices.Contains(u.GetGroups(), "system:masters")
}
