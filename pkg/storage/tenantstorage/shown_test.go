package tenantstorage

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"

	"go.miloapis.com/milo/pkg/tenancy"
)

// shownOnly shows one project's objects in the all-projects view.
type shownOnly struct{ id string }

func (s shownOnly) ProjectsShown(schema.GroupResource) func(string) bool {
	return func(id string) bool { return id == s.id }
}

// The all-projects view shows anyone but a superuser the objects of the
// projects Shown allows, in lists and in watches; superusers see them all.
func TestAllProjectsShowsWhatShownAllows(t *testing.T) {
	s, _ := newShownStorage(t, "shownconfigmaps", shownOnly{id: idOf("a")})
	const prefix = "/shownconfigmaps"
	create(t, s, in("a"), prefix, "default", "one", "a")
	create(t, s, in("b"), prefix, "default", "one", "b")

	as := func(u user.Info) context.Context {
		return request.WithUser(tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant), u)
	}
	service := as(&user.DefaultInfo{Name: "service"})
	superuser := as(&user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}})
	projectsOf := func(items []corev1.ConfigMap) []string {
		var out []string
		for _, cm := range items {
			out = append(out, cm.Annotations[tenancy.AnnotationKey])
		}
		return out
	}
	if got := projectsOf(list(t, s, service, prefix, "")); len(got) != 1 || got[0] != "a" {
		t.Fatalf("a service lists the objects of %v, want a's only", got)
	}
	if got := projectsOf(list(t, s, superuser, prefix, "")); len(got) != 2 {
		t.Fatalf("a superuser lists the objects of %v, want every project's", got)
	}

	pred := storage.Everything
	pred.GetAttrs = storage.DefaultNamespaceScopedAttr
	w, err := s.Watch(service, prefix, storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: pred})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	create(t, s, in("b"), prefix, "default", "two", "b")
	create(t, s, in("a"), prefix, "default", "two", "a")
	seen := 0
	for e := range w.ResultChan() {
		if e.Type == watch.Bookmark {
			continue
		}
		m, err := meta.Accessor(e.Object)
		if err != nil {
			t.Fatal(err)
		}
		if p := m.GetAnnotations()[tenancy.AnnotationKey]; p != "a" {
			t.Fatalf("a service's watch delivered an object of project %s", p)
		}
		// The initial state (a's "one"), then a's "two": b's "two", created
		// between them, never arrives.
		if seen++; m.GetName() == "two" {
			break
		}
	}
	if seen != 2 {
		t.Fatalf("the watch delivered %d events of a, want 2", seen)
	}
}
