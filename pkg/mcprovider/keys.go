package mcprovider

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"

	miloclient "go.miloapis.com/milo/pkg/client"
	"go.miloapis.com/milo/pkg/tenancy"
)

// The shared cache holds every project's objects, and two projects' objects
// may share a namespace and name. Its transform (qualify) puts the project's
// storage id in front of each object's namespace — "<id>/<namespace>", or
// "<id>/" for a cluster-scoped object — so that store keys never collide and
// an object's key alone names its project. A project's view takes the id off
// again (unqualify) on a copy before anything outside the provider sees it.
// No namespace or project id contains "/", so a namespace holding one is
// qualified, and one without is not (an object of no project).

// projectIndex indexes the shared informers by project storage id.
const projectIndex = "milo.project"

// qualify is the shared cache's transform. Objects of the platform (none is
// served by the all-projects view) are left as they are. Applying it twice
// changes nothing (client-go may transform an object twice).
func qualify(obj any) (any, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	p, ok := miloclient.ProjectOf(m)
	if !ok || strings.Contains(m.GetNamespace(), "/") {
		return obj, nil
	}
	qualified := qualifiedNamespace(p.ID, m.GetNamespace())
	m.SetNamespace(qualified)
	// The annotation the id came from takes its value from the qualified
	// namespace's first bytes, so that the object holds the id once and
	// qualifying it costs next to nothing (the decoded value is freed).
	a := m.GetAnnotations()
	key := tenancy.IDAnnotationKey
	if a[key] != p.ID {
		key = tenancy.AnnotationKey // a project stored before storage ids
	}
	a[key] = qualified[:len(p.ID)]
	// Managed fields are the largest part of most objects' metadata and no
	// reconciler reads them from a cache.
	m.SetManagedFields(nil)
	return obj, nil
}

// idOf returns the project storage id of a qualified object or tombstone.
func idOf(obj any) (string, bool) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return "", false
	}
	id, _, qualified := strings.Cut(m.GetNamespace(), "/")
	return id, qualified && id != ""
}

// indexByProject is projectIndex's function.
func indexByProject(obj any) ([]string, error) {
	if id, ok := idOf(obj); ok {
		return []string{id}, nil
	}
	return nil, nil
}

// qualifiedNamespace is where the shared cache keeps namespace ns of the
// project with storage id id ("" for cluster-scoped objects).
func qualifiedNamespace(id, ns string) string { return id + "/" + ns }

// unqualified returns a deep copy of a qualified object as its project serves it.
func unqualified(obj runtime.Object) runtime.Object {
	c := obj.DeepCopyObject()
	if m, ok := c.(metav1.Object); ok {
		_, ns, _ := strings.Cut(m.GetNamespace(), "/")
		m.SetNamespace(ns)
	}
	return c
}

// unqualifiedEvent is unqualified for whatever an informer hands a handler:
// an object or a deletion tombstone.
func unqualifiedEvent(obj any) any {
	switch o := obj.(type) {
	case toolscache.DeletedFinalStateUnknown:
		inner, ok := o.Obj.(runtime.Object)
		if !ok {
			return o
		}
		_, key, _ := strings.Cut(o.Key, "/")
		return toolscache.DeletedFinalStateUnknown{Key: strings.TrimPrefix(key, "/"), Obj: unqualified(inner)}
	case runtime.Object:
		return unqualified(o)
	}
	return obj
}
