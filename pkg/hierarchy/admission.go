// Package hierarchy keeps the Organization → Folder → Project tree consistent at
// admission: parents exist and are not being deleted, everything below an
// organization carries its label, folders nest at most MaxDepth deep, nothing
// moves across organizations or into a cycle, and every object gets the
// finalizers that make its deletion complete.
package hierarchy

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/objectview"
	"go.miloapis.com/milo/pkg/tenancy"
)

// PluginName is the admission plugin's name.
const PluginName = "MiloHierarchy"

// MaxDepth is how deep folders may nest below their organization.
const MaxDepth = 8

// Finalizers set at creation. Each keeps its object until what it names is done.
const (
	// OrganizationFinalizer: the organization's folders, projects and namespace are deleted.
	OrganizationFinalizer = "resourcemanager.miloapis.com/organization-cleanup"
	// FolderFinalizer: the folder's child folders and projects are deleted.
	FolderFinalizer = "resourcemanager.miloapis.com/folder-cleanup"
	// ProjectFinalizer: every object in the project is deleted through its API.
	ProjectFinalizer = "resourcemanager.miloapis.com/project-cleanup"
	// PurgeFinalizer: the project's keys are purged from storage. Only the API
	// server itself (which purges) may remove it, so that no project's name is
	// released while data of it remains.
	PurgeFinalizer = "resourcemanager.miloapis.com/project-purge"
)

// serverFinalizers are the finalizers only the server removes, each once what
// it names is done. A tenant who could remove one could delete an object with
// its cleanup skipped: the purge finalizer only the API server itself (which
// purges), the others only platform superusers (the controllers).
var serverFinalizers = map[string]string{
	OrganizationFinalizer: user.SystemPrivilegedGroup,
	FolderFinalizer:       user.SystemPrivilegedGroup,
	ProjectFinalizer:      user.SystemPrivilegedGroup,
	MembershipFinalizer:   user.SystemPrivilegedGroup,
	PurgeFinalizer:        user.APIServerUser,
}

// guardFinalizers refuses an update that removes a server-owned finalizer
// unless the server's own identity makes it.
func guardFinalizers(ctx context.Context, gr schema.GroupResource, name string, old, obj *unstructured.Unstructured) error {
	u, _ := request.UserFrom(ctx)
	for _, f := range old.GetFinalizers() {
		owner, ok := serverFinalizers[f]
		if !ok || slices.Contains(obj.GetFinalizers(), f) {
			continue
		}
		if u != nil && (u.GetName() == owner || slices.Contains(u.GetGroups(), owner)) {
			continue
		}
		return apierrors.NewForbidden(gr, name, fmt.Errorf("finalizer %s is removed by the server once its cleanup is done", f))
	}
	return nil
}

// keepStorageID keeps a Project's storage id annotation what the server made
// it: a client that could set it could point its project at another
// project's storage.
func keepStorageID(obj, old *unstructured.Unstructured) {
	annotations := obj.GetAnnotations()
	want := ""
	if old != nil {
		want = old.GetAnnotations()[tenancy.StorageIDAnnotation]
	}
	if annotations[tenancy.StorageIDAnnotation] == want {
		return
	}
	if want == "" {
		delete(annotations, tenancy.StorageIDAnnotation)
	} else {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[tenancy.StorageIDAnnotation] = want
	}
	obj.SetAnnotations(annotations)
}

// finalizersOf lists the finalizers each kind gets at creation.
var finalizersOf = map[string][]string{
	organizations.Resource: {OrganizationFinalizer},
	folders.Resource:       {FolderFinalizer},
	projects.Resource:      {ProjectFinalizer, PurgeFinalizer},
}

var (
	organizations = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("organizations")
	folders       = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("folders")
	projects      = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("projects")
	suspensions   = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("projectsuspensions")
	// Memberships are OrganizationMemberships.
	Memberships = resourcemanagerv1alpha1.SchemeGroupVersion.WithResource("organizationmemberships")
)

// MembershipFinalizer holds an OrganizationMembership until its PolicyBindings are gone.
const MembershipFinalizer = "resourcemanager.miloapis.com/membership-cleanup"

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
	if gvr.Group != organizations.Group {
		return nil
	}
	obj, sync, ok := objectview.Of(a.GetObject(), a.GetKind())
	if !ok {
		return nil
	}
	// What the plugin sets is metadata: labels, annotations, finalizers.
	defer sync()
	old, _, _ := objectview.Of(a.GetOldObject(), a.GetKind())
	if old != nil && a.GetOperation() == admission.Update {
		if err := guardFinalizers(ctx, gvr.GroupResource(), a.GetName(), old, obj); err != nil {
			return err
		}
	}
	if finalizersOf[gvr.Resource] == nil {
		return nil
	}
	if a.GetOperation() == admission.Create {
		for _, f := range finalizersOf[gvr.Resource] {
			if !slices.Contains(obj.GetFinalizers(), f) {
				obj.SetFinalizers(append(obj.GetFinalizers(), f))
			}
		}
	}
	if gvr.Resource == projects.Resource {
		keepStorageID(obj, old)
	}
	if gvr.Resource == organizations.Resource {
		stampCreator(ctx, obj, old)
		return nil
	}
	refField := "parentRef"
	if gvr.Resource == projects.Resource {
		refField = "ownerRef"
	}
	kind, _, _ := unstructured.NestedString(obj.Object, "spec", refField, "kind")
	name, _, _ := unstructured.NestedString(obj.Object, "spec", refField, "name")
	field := "spec." + refField

	if t := tenancy.From(ctx); t.Kind == tenancy.Organization {
		// In an organization's context a parent of another organization is
		// told exactly as one that does not exist, before anything about its
		// chain (depth, deletion) could be told.
		if ours, err := p.inOrganization(ctx, kind, name, t.Name); err != nil {
			return apierrors.NewInternalError(err)
		} else if !ours {
			return invalid(a, field, kind+"/"+name, fmt.Sprintf("%s %q does not exist", kind, name))
		}
	}
	org, problem, deleting, err := p.organizationOf(ctx, kind, name, a.GetName(), gvr.Resource == folders.Resource)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if problem != "" {
		return invalid(a, field, kind+"/"+name, problem)
	}
	// Nothing new may appear below an object being deleted, or its deletion
	// could never finish; what is already there may still be updated.
	if deleting != "" && (old == nil || !sameParent(old, obj)) {
		return apierrors.NewForbidden(gvr.GroupResource(), a.GetName(), fmt.Errorf("%s is being deleted", deleting))
	}
	if old != nil && a.GetOperation() == admission.Update {
		if was := old.GetLabels()[tenancy.OrganizationLabel]; was != "" && was != org {
			return invalid(a, field, kind+"/"+name, fmt.Sprintf("%s %q is in organization %q; moving from organization %q to another organization is not allowed", kind, name, org, was))
		}
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
//
// deleting names the first object of the chain that is being deleted, if any.
func (p *plugin) organizationOf(ctx context.Context, kind, name, self string, isFolder bool) (org, problem, deleting string, err error) {
	depth := 1
	noteDeleting := func(kind string, o metav1.Object) {
		if deleting == "" && o.GetDeletionTimestamp() != nil {
			deleting = kind + " " + o.GetName()
		}
	}
	for {
		switch kind {
		case "Organization":
			o, err := p.tree.get(ctx, p.tree.orgs, organizations, name)
			if err != nil {
				return missing("Organization", name, err)
			}
			noteDeleting(kind, o)
			return name, "", deleting, nil
		case "Folder":
			if isFolder && name == self {
				return "", fmt.Sprintf("folder %q would become its own ancestor", self), "", nil
			}
			if isFolder && depth >= MaxDepth {
				return "", fmt.Sprintf("folders nest at most %d deep below their organization", MaxDepth), "", nil
			}
			f, err := p.tree.get(ctx, p.tree.folders, folders, name)
			if err != nil {
				return missing("Folder", name, err)
			}
			noteDeleting(kind, f)
			kind, name = ParentOf(f)
			depth++
			if depth > MaxDepth+1 {
				return "", "", "", fmt.Errorf("folder chain above %q is longer than %d: a cycle in storage", self, MaxDepth)
			}
		default:
			return "", "kind must be Organization or Folder", "", nil
		}
	}
}

// inOrganization reports whether the Organization or Folder a reference names
// belongs to org.
func (p *plugin) inOrganization(ctx context.Context, kind, name, org string) (bool, error) {
	switch kind {
	case "Organization":
		return name == org, nil
	case "Folder":
		f, err := p.tree.get(ctx, p.tree.folders, folders, name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return f.GetLabels()[tenancy.OrganizationLabel] == org, nil
	}
	return true, nil // an invalid kind is told as such
}

func missing(kind, name string, err error) (string, string, string, error) {
	if apierrors.IsNotFound(err) {
		return "", fmt.Sprintf("%s %q does not exist", kind, name), "", nil
	}
	return "", "", "", err
}

func sameParent(a, b *unstructured.Unstructured) bool {
	ak, an := ParentOf(a)
	bk, bn := ParentOf(b)
	return ak == bk && an == bn
}

func invalid(a admission.Attributes, path, value, msg string) error {
	return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(),
		field.ErrorList{field.Invalid(field.NewPath("spec", strings.TrimPrefix(path, "spec.")), value, msg)})
}

// CreatorAnnotation records, on an Organization, who created it; the
// organization controller makes that user its first owner. The server sets it;
// what a client sends is ignored.
const CreatorAnnotation = "iam.miloapis.com/created-by"

func stampCreator(ctx context.Context, obj, old *unstructured.Unstructured) {
	creator := ""
	if old != nil {
		creator = old.GetAnnotations()[CreatorAnnotation]
	} else if u, ok := request.UserFrom(ctx); ok {
		creator = u.GetName()
	}
	annotations := obj.GetAnnotations()
	if creator == "" {
		delete(annotations, CreatorAnnotation)
	} else {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[CreatorAnnotation] = creator
	}
	obj.SetAnnotations(annotations)
}
