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
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
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

// Set records s.
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

// Register adds the plugin, which reads index, to plugins.
func Register(plugins *admission.Plugins, index *Index) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update), index: index}, nil
	})
}

type plugin struct {
	*admission.Handler
	index *Index
}

var _ admission.ValidationInterface = &plugin{}

// Validate refuses a project's creates and updates while it is suspended,
// whoever asks, platform administrators included. The server's own
// controllers (the loopback identity) go on: they finish what deletions of
// namespaces and of the project need.
func (p *plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	t := tenancy.From(ctx)
	if t.Kind != tenancy.Project {
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
