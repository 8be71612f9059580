// Package suspension enforces ProjectSuspensions: while one names a
// project, the project's control plane refuses creates and updates with a
// 403 naming the suspension; reads and deletes work. An index of the
// platform's suspensions (few, one informer) answers every write in a
// project without a read.
package suspension

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/objectview"
	"go.miloapis.com/milo/pkg/tenancy"
)

// PluginName is the name of the suspension admission plugin.
const PluginName = "MiloProjectSuspension"

// AuditAnnotation, on the audit event of a refused write, names the suspension.
const AuditAnnotation = "suspension.miloapis.com/name"

// Index holds the suspensions in effect, by project.
type Index struct {
	mu      sync.RWMutex
	byName  map[string]*resourcemanagerv1alpha1.ProjectSuspension
	project map[string][]string // project -> suspension names
	synced  atomic.Bool
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{byName: map[string]*resourcemanagerv1alpha1.ProjectSuspension{}, project: map[string][]string{}}
}

// Set records s, which is kept as it is (an informer's object): neither the
// index nor its readers change it.
func (x *Index) Set(s *resourcemanagerv1alpha1.ProjectSuspension) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deleteLocked(s.Name)
	if s.DeletionTimestamp != nil || s.Status.Phase == resourcemanagerv1alpha1.SuspensionLifted {
		return
	}
	x.byName[s.Name] = s
	p := s.Spec.ProjectRef.Name
	x.project[p] = append(x.project[p], s.Name)
	sort.Strings(x.project[p])
}

// Delete forgets the suspension name: it is lifted.
func (x *Index) Delete(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deleteLocked(name)
}

func (x *Index) deleteLocked(name string) {
	old, ok := x.byName[name]
	if !ok {
		return
	}
	delete(x.byName, name)
	p := old.Spec.ProjectRef.Name
	names := x.project[p]
	for i, n := range names {
		if n == name {
			names = append(names[:i], names[i+1:]...)
			break
		}
	}
	if len(names) == 0 {
		delete(x.project, p)
	} else {
		x.project[p] = names
	}
}

// MarkSynced records that the index holds every stored suspension.
func (x *Index) MarkSynced() { x.synced.Store(true) }

// Of returns the first suspension in effect for project, or nil.
func (x *Index) Of(project string) *resourcemanagerv1alpha1.ProjectSuspension {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if names := x.project[project]; len(names) > 0 {
		return x.byName[names[0]]
	}
	return nil
}

// Register adds the plugin, which reads index, to plugins. It finds which
// organization a suspended project belongs to with hierarchy.
func Register(plugins *admission.Plugins, index *Index, hierarchy tenancy.HierarchyLookup) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), index: index, hierarchy: hierarchy}, nil
	})
}

type plugin struct {
	*admission.Handler
	index     *Index
	hierarchy tenancy.HierarchyLookup
}

var (
	_ admission.MutationInterface   = &plugin{}
	_ admission.ValidationInterface = &plugin{}
)

var projectsResource = schema.GroupResource{Group: resourcemanagerv1alpha1.SchemeGroupVersion.Group, Resource: "projects"}

// Admit labels a ProjectSuspension with the organization of the project it
// names, whatever the client sent: the label is what an organization's
// context serves it by. A suspension keeps the label it was created with
// (its project cannot change); one stored without it (before it existed)
// gets it at its next update.
func (p *plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != tenancy.SuspensionsResource || a.GetSubresource() != "" || a.GetOperation() == admission.Delete {
		return nil
	}
	obj, sync, ok := objectview.Of(a.GetObject(), a.GetKind())
	if !ok {
		return nil
	}
	defer sync()
	org := ""
	if old, _, ok := objectview.Of(a.GetOldObject(), a.GetKind()); ok && a.GetOperation() == admission.Update && old.GetLabels()[tenancy.OrganizationLabel] != "" {
		org = old.GetLabels()[tenancy.OrganizationLabel]
	} else if project, _, _ := unstructured.NestedString(obj.Object, "spec", "projectRef", "name"); project != "" && p.hierarchy != nil {
		var err error
		if org, _, err = p.hierarchy.OrganizationOf(ctx, projectsResource, project); err != nil {
			return apierrors.NewServiceUnavailable(fmt.Sprintf("cannot tell which organization project %q belongs to: %v", project, err))
		}
	}
	labels := obj.GetLabels()
	delete(labels, tenancy.OrganizationLabel)
	if org != "" {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[tenancy.OrganizationLabel] = org
	}
	obj.SetLabels(labels)
	return nil
}

// Validate refuses a project's creates and updates while it is suspended,
// whoever asks, platform administrators included. The server's own
// controllers (the loopback identity) go on: they finish what deletions of
// namespaces and of the project need. In an organization's context, it
// allows lifting (deleting) only a suspension the consumer may lift.
func (p *plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	t := tenancy.From(ctx)
	if t.Kind == tenancy.Organization && a.GetResource().GroupResource() == tenancy.SuspensionsResource && a.GetOperation() == admission.Delete {
		return liftByConsumer(a, t.Name)
	}
	if t.Kind != tenancy.Project || a.GetOperation() == admission.Delete {
		return nil
	}
	if u := a.GetUserInfo(); u != nil && u.GetName() == user.APIServerUser {
		return nil
	}
	if !p.index.synced.Load() {
		return apierrors.NewServiceUnavailable("project suspensions are loading; retry in a moment")
	}
	s := p.index.Of(t.Name)
	if s == nil {
		return nil
	}
	_ = a.AddAnnotation(AuditAnnotation, s.Name)
	return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(),
		fmt.Errorf("project %q is suspended (ProjectSuspension %q, reason %s): creates and updates are refused until the suspension is lifted",
			t.Name, s.Name, s.Spec.Reason))
}

// liftByConsumer allows an organization's delete of a suspension of one of
// its projects (the router has checked that it is) only when its
// reinstateAuthority is Consumer: one the platform's operators placed with
// Operator authority stays until they lift it.
func liftByConsumer(a admission.Attributes, org string) error {
	old, _, ok := objectview.Of(a.GetOldObject(), a.GetKind())
	if !ok || old.GetLabels()[tenancy.OrganizationLabel] != org {
		// (The router found it the organization's; checked again on
		// the object being deleted.)
		return apierrors.NewNotFound(tenancy.SuspensionsResource, a.GetName())
	}
	authority, _, _ := unstructured.NestedString(old.Object, "spec", "reinstateAuthority")
	if authority != string(resourcemanagerv1alpha1.AuthorityConsumer) {
		return apierrors.NewForbidden(tenancy.SuspensionsResource, a.GetName(),
			fmt.Errorf("its reinstateAuthority is %s: only the platform's operators lift it", authority))
	}
	return nil
}
