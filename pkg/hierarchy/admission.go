// Package hierarchy keeps the Organization → Folder → Project tree consistent at
// admission: parents exist, everything below an organization carries its label,
// folders nest at most MaxDepth deep, and nothing moves across organizations or
// into a cycle.
package hierarchy

import (
	"context"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"go.miloapis.com/milo/pkg/tenancy"
)

// PluginName is the admission plugin's name.
const PluginName = "MiloHierarchy"

// MaxDepth is how deep folders may nest below their organization.
const MaxDepth = 8

var (
	organizations = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "organizations"}
	folders       = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "folders"}
	projects      = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "projects"}
)

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins, tree *Tree) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update), tree: tree}, nil
	})
}

type plugin struct {
	*admission.Handler
	tree *Tree
}

var _ admission.MutationInterface = &plugin{}

func (p *plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" || tenancy.From(ctx).IsProject() {
		return nil
	}
	if !p.tree.initialized() {
		return apierrors.NewServiceUnavailable("the hierarchy is not loaded yet")
	}
	gvr := a.GetResource()
	if gvr.Group != organizations.Group || (gvr.Resource != folders.Resource && gvr.Resource != projects.Resource) {
		return nil
	}
	obj, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	refField := "parentRef"
	if gvr.Resource == projects.Resource {
		refField = "ownerRef"
	}
	kind, _, _ := unstructured.NestedString(obj.Object, "spec", refField, "kind")
	name, _, _ := unstructured.NestedString(obj.Object, "spec", refField, "name")
	field := "spec." + refField

	org, problem, err := p.organizationOf(ctx, kind, name, a.GetName(), gvr.Resource == folders.Resource)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if problem != "" {
		return invalid(a, field, kind+"/"+name, problem)
	}
	if old, ok := a.GetOldObject().(*unstructured.Unstructured); ok && a.GetOperation() == admission.Update {
		if was := old.GetLabels()[tenancy.OrganizationLabel]; was != "" && was != org {
			return invalid(a, field, kind+"/"+name, fmt.Sprintf("%s %q is in organization %q; moving from organization %q to another organization is not allowed", kind, name, org, was))
		}
	}
	if t := tenancy.From(ctx); t.Kind == tenancy.Organization && t.Name != org {
		return invalid(a, field, kind+"/"+name, fmt.Sprintf("%s %q is not in organization %q", kind, name, t.Name))
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[tenancy.OrganizationLabel] = org
	obj.SetLabels(labels)
	return nil
}

// organizationOf resolves the organization a parent reference leads to, checking
// the chain on the way: every parent exists, folders nest at most MaxDepth deep,
// and (for a folder, self) the chain does not pass through the object itself.
// A problem with the reference is returned as a message; err is for failures to look.
func (p *plugin) organizationOf(ctx context.Context, kind, name, self string, isFolder bool) (org, problem string, err error) {
	depth := 1
	for {
		switch kind {
		case "Organization":
			if _, err := p.tree.get(ctx, p.tree.orgs, organizations, name); err != nil {
				return missing("Organization", name, err)
			}
			return name, "", nil
		case "Folder":
			if isFolder && name == self {
				return "", fmt.Sprintf("folder %q would become its own ancestor", self), nil
			}
			if isFolder && depth >= MaxDepth {
				return "", fmt.Sprintf("folders nest at most %d deep below their organization", MaxDepth), nil
			}
			f, err := p.tree.get(ctx, p.tree.folders, folders, name)
			if err != nil {
				return missing("Folder", name, err)
			}
			kind, _, _ = unstructured.NestedString(f.Object, "spec", "parentRef", "kind")
			name, _, _ = unstructured.NestedString(f.Object, "spec", "parentRef", "name")
			depth++
			if depth > MaxDepth+1 {
				return "", "", fmt.Errorf("folder chain above %q is longer than %d: a cycle in storage", self, MaxDepth)
			}
		default:
			return "", "kind must be Organization or Folder", nil
		}
	}
}

func missing(kind, name string, err error) (string, string, error) {
	if apierrors.IsNotFound(err) {
		return "", fmt.Sprintf("%s %q does not exist", kind, name), nil
	}
	return "", "", err
}

func invalid(a admission.Attributes, path, value, msg string) error {
	return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(),
		field.ErrorList{field.Invalid(field.NewPath("spec", strings.TrimPrefix(path, "spec.")), value, msg)})
}
