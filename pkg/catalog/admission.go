package catalog

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"

	servicesv1alpha1 "go.miloapis.com/milo/pkg/apis/services/v1alpha1"
	"go.miloapis.com/milo/pkg/iam/evaluator"
	"go.miloapis.com/milo/pkg/tenancy"
)

// PluginName is the name of the admission plugin of the service catalog.
const PluginName = "MiloServices"

// Register adds the plugin, which reads c, to plugins. It
//
//   - keeps a Service's phase label equal to its spec.phase (the catalog a
//     consumer lists selects on it);
//   - refuses (422) a Service that lists a resource another Service lists,
//     or a resource of the core group, of a Kubernetes group or of Milo's
//     own groups, whose requests the platform's own controllers rely on;
//   - refuses (422) a ServiceActivation outside a project, for a Service
//     that does not exist, is in Draft or is Retired, and warns about a
//     Deprecated one.
func Register(plugins *admission.Plugins, c *Catalog) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update), catalog: c}, nil
	})
}

type plugin struct {
	*admission.Handler
	catalog *Catalog
}

var (
	_ admission.MutationInterface   = &plugin{}
	_ admission.ValidationInterface = &plugin{}
)

// reservedGroups are the groups a Service may not gate.
var reservedGroups = sets.New("resourcemanager.miloapis.com", "iam.miloapis.com", "quota.miloapis.com", servicesv1alpha1.GroupName)

// Reserved reports whether a Service may not list resources of group.
func Reserved(group string) bool {
	return !strings.Contains(group, ".") || group == "k8s.io" || strings.HasSuffix(group, ".k8s.io") || reservedGroups.Has(group)
}

func (p *plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	obj, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	gr := a.GetResource().GroupResource()
	if gr == tenancy.Activations && !p.catalog.Synced() {
		return apierrors.NewServiceUnavailable("the service catalog is loading; retry in a moment")
	}
	switch gr {
	case tenancy.Catalog:
		labelPhase(obj)
		defaultRolesNamespace(obj)
	case tenancy.Activations:
		// The Service the activation enables is the one that exists when
		// it is created, recorded by the server; the client's word is not
		// taken, at creation or later.
		uid := ""
		if old, ok := a.GetOldObject().(*unstructured.Unstructured); ok && a.GetOperation() == admission.Update {
			uid = old.GetAnnotations()[ServiceUIDAnnotation]
		} else {
			name, _, _ := unstructured.NestedString(obj.Object, "spec", "serviceRef", "name")
			uid, _ = p.catalog.UID(name)
		}
		annotations := obj.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[ServiceUIDAnnotation] = uid
		obj.SetAnnotations(annotations)
	}
	return nil
}

// labelPhase keeps a Service's phase label equal to its spec.phase.
func labelPhase(obj *unstructured.Unstructured) {
	phase, _, _ := unstructured.NestedString(obj.Object, "spec", "phase")
	if phase == "" {
		phase = string(servicesv1alpha1.Draft)
	}
	labels := obj.GetLabels()
	if labels[servicesv1alpha1.PhaseLabel] != phase {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[servicesv1alpha1.PhaseLabel] = phase
		obj.SetLabels(labels)
	}
}

// defaultRolesNamespace names the platform's namespace for a default Role
// that names none.
func defaultRolesNamespace(obj *unstructured.Unstructured) {
	roles, found, _ := unstructured.NestedSlice(obj.Object, "spec", "defaultRoles")
	if !found {
		return
	}
	changed := false
	for _, r := range roles {
		if m, ok := r.(map[string]any); ok && (m["namespace"] == nil || m["namespace"] == "") {
			m["namespace"] = evaluator.PlatformNamespace
			changed = true
		}
	}
	if changed {
		_ = unstructured.SetNestedSlice(obj.Object, roles, "spec", "defaultRoles")
	}
}

func (p *plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	gr := a.GetResource().GroupResource()
	if (gr == tenancy.Catalog || gr == tenancy.Activations) && !p.catalog.Synced() {
		// What the catalog holds decides: until it is loaded, nothing is.
		return apierrors.NewServiceUnavailable("the service catalog is loading; retry in a moment")
	}
	switch gr {
	case tenancy.Catalog:
		return p.validateService(a)
	case tenancy.Activations:
		if a.GetOperation() != admission.Create {
			return nil
		}
		return p.validateActivation(ctx, a)
	}
	return nil
}

func (p *plugin) validateService(a admission.Attributes) error {
	svc, ok := toService(a.GetObject())
	if !ok {
		return nil
	}
	var errs field.ErrorList
	for i, r := range svc.Spec.Resources {
		path := field.NewPath("spec", "resources").Index(i)
		gr := schema.GroupResource{Group: r.Group, Resource: r.Resource}
		if Reserved(r.Group) {
			errs = append(errs, field.Invalid(path.Child("group"), r.Group,
				"the core group, Kubernetes' groups and Milo's own are served in every context and cannot belong to a service"))
			continue
		}
		if owner, ok := p.catalog.Owner(gr); ok && owner != svc.Name {
			errs = append(errs, field.Duplicate(path, fmt.Sprintf("%s is listed by Service %s already", gr, owner)))
		}
	}
	seen := map[string]bool{}
	roles := svc.Spec.DefaultRoles
	if old, ok := toService(a.GetOldObject()); ok && a.GetOperation() == admission.Update && slices.Equal(old.Spec.DefaultRoles, roles) {
		// Stored before the rule: kept until its default Roles change,
		// so that it can still be updated and deleted.
		roles = nil
	}
	for i, r := range roles {
		path := field.NewPath("spec", "defaultRoles").Index(i)
		if r.Namespace != evaluator.PlatformNamespace {
			// What a service offers every consumer must be a Role every
			// consumer may bind: a PolicyBinding grants Roles of its own
			// namespace or of the platform's only.
			errs = append(errs, field.NotSupported(path.Child("namespace"), r.Namespace, []string{evaluator.PlatformNamespace}))
		}
		if seen[r.Name] {
			errs = append(errs, field.Duplicate(path.Child("name"), r.Name))
		}
		seen[r.Name] = true
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(servicesv1alpha1.SchemeGroupVersion.WithKind("Service").GroupKind(), svc.Name, errs)
	}
	return nil
}

func (p *plugin) validateActivation(ctx context.Context, a admission.Attributes) error {
	kind := servicesv1alpha1.SchemeGroupVersion.WithKind("ServiceActivation").GroupKind()
	invalid := func(path *field.Path, value any, msg string) error {
		return apierrors.NewInvalid(kind, a.GetName(), field.ErrorList{field.Invalid(path, value, msg)})
	}
	if !tenancy.From(ctx).IsProject() {
		return invalid(field.NewPath("metadata", "name"), a.GetName(), "a ServiceActivation enables a service in a project: create it in the project")
	}
	obj, ok := a.GetObject().(runtime.Unstructured)
	if !ok {
		return nil
	}
	name, _, _ := unstructured.NestedString(obj.UnstructuredContent(), "spec", "serviceRef", "name")
	path := field.NewPath("spec", "serviceRef", "name")
	phase, exists := p.catalog.Phase(name)
	switch {
	case !exists || phase == servicesv1alpha1.Draft || phase == servicesv1alpha1.Retired:
		// Drafts and Retired services are not in the catalog: the same
		// answer as a missing one, so no name outside it can be probed.
		return apierrors.NewInvalid(kind, a.GetName(), field.ErrorList{field.NotFound(path, name)})
	case phase == servicesv1alpha1.Deprecated:
		warning.AddWarning(ctx, "", fmt.Sprintf("service %s is Deprecated: it may be retired; see its description for what replaces it", name))
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if uid, _ := p.catalog.UID(name); u.GetAnnotations()[ServiceUIDAnnotation] != uid {
			// The Service changed between mutation and validation: the
			// activation would record another one.
			return apierrors.NewConflict(tenancy.Activations, a.GetName(), fmt.Errorf("service %s changed while it was being enabled; try again", name))
		}
	}
	return nil
}
