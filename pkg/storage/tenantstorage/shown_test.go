package tenantstorage

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
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

func (shownOnly) OnShownChange(schema.GroupResource, uint64, func(string)) (func(), bool) {
	return func() {}, true
}

// switchable shows the projects it is told to, and tells its subscribers
// when that changes, as the catalog does when a project enables a service.
type switchable struct {
	mu        sync.Mutex
	ids       map[string]bool
	subs      map[int]func(string)
	next      int
	changedAt uint64
}

func (s *switchable) ProjectsShown(schema.GroupResource) func(string) bool {
	return func(id string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.ids[id]
	}
}

func (s *switchable) OnShownChange(_ schema.GroupResource, since uint64, changed func(string)) (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	id := s.next
	s.subs[id] = changed
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, id)
	}, since == 0 || s.changedAt <= since
}

// set shows or hides a project's objects, a change made at resource version rv.
func (s *switchable) set(id string, shown bool, rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[id] = shown
	s.changedAt = rv
	for _, changed := range s.subs {
		changed(id)
	}
}

func (s *switchable) subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
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

// Pages of the all-projects view are filled with shown objects, and their
// continue tokens name the last object returned, never a hidden one.
func TestAllProjectsPagesNameShownObjectsOnly(t *testing.T) {
	s, _ := newShownStorage(t, "pagedconfigmaps", shownOnly{id: idOf("a")})
	const prefix = "/pagedconfigmaps"
	for i := range 5 {
		create(t, s, in("a"), prefix, "default", fmt.Sprintf("a%d", i), "a")
		create(t, s, in("b"), prefix, "default", fmt.Sprintf("b%d", i), "b")
		create(t, s, in("b"), prefix, "kube-system", fmt.Sprintf("b%d", i), "b")
	}
	ctx := request.WithUser(tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant), &user.DefaultInfo{Name: "service"})
	pred := storage.Everything
	pred.GetAttrs = storage.DefaultNamespaceScopedAttr
	pred.Limit = 2
	var names []string
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("the pages never end")
		}
		out := &corev1.ConfigMapList{}
		if err := s.GetList(ctx, prefix, storage.ListOptions{Recursive: true, Predicate: pred}, out); err != nil {
			t.Fatal(err)
		}
		for _, cm := range out.Items {
			names = append(names, cm.Name)
		}
		if out.Continue == "" {
			break
		}
		raw, err := base64.RawURLEncoding.DecodeString(out.Continue)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), idOf("b")) || len(out.Items) != 2 {
			t.Fatalf("a page of %d items with a token naming %s", len(out.Items), raw)
		}
		pred.Continue = out.Continue
	}
	if fmt.Sprint(names) != "[a0 a1 a2 a3 a4]" {
		t.Fatalf("the pages list %v, want a's five objects", names)
	}
}

// A project whose objects become shown while an all-projects watch is open
// has them sent as ADDED (those the watch's selector selects), and one whose
// objects become hidden has them sent as DELETED, as they were where the
// stream is; later events follow what is shown. A watch from before a change
// is refused (410), and one that does not know where its stream is ends
// (410) at a change; a watch stops listening for changes when it ends.
func TestAllProjectsWatchReplaysWhatBecomesShown(t *testing.T) {
	shown := &switchable{ids: map[string]bool{idOf("a"): true}, subs: map[int]func(string){}}
	s, _ := newShownStorage(t, "replayedconfigmaps", shown)
	const prefix = "/replayedconfigmaps"
	put := func(project, name, app string) {
		t.Helper()
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": app}}}
		if err := s.Create(in(project), prefix+"/default/"+name, obj, &corev1.ConfigMap{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "a-one", "x")
	put("b", "b-one", "x")
	put("b", "b-other", "y")

	ctx, cancel := context.WithCancel(request.WithUser(tenancy.WithTenant(context.Background(), tenancy.AllProjectsTenant), &user.DefaultInfo{Name: "service"}))
	defer cancel()
	pred := storage.Everything
	pred.GetAttrs = storage.DefaultNamespaceScopedAttr
	pred.Label = labels.SelectorFromSet(labels.Set{"app": "x"})
	now := func() string {
		t.Helper()
		l := &corev1.ConfigMapList{}
		if err := s.GetList(ctx, prefix, storage.ListOptions{Recursive: true, Predicate: pred}, l); err != nil {
			t.Fatal(err)
		}
		return l.ResourceVersion
	}
	// As an informer does: list, then watch from the list.
	listed := now()
	w, err := s.Watch(ctx, prefix, storage.ListOptions{ResourceVersion: listed, Recursive: true, Predicate: pred})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func(w watch.Interface, want watch.EventType, name string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("the watch ended, waiting for %s %s", want, name)
				}
				if e.Type == watch.Bookmark {
					continue
				}
				if e.Type != want || (name != "" && eventName(e) != name) {
					t.Fatalf("got %s %s %v, want %s %s", e.Type, eventName(e), e.Object, want, name)
				}
				return
			case <-timeout:
				t.Fatalf("no %s %s", want, name)
			}
		}
	}
	rvOf := func(v string) uint64 {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// b's objects are shown from now on: its existing one the selector
	// selects arrives, then its new events.
	shown.set(idOf("b"), true, rvOf(now()))
	next(w, watch.Added, "b-one")
	put("b", "b-two", "x")
	next(w, watch.Added, "b-two")

	// a's are hidden: the client is told to forget them, and hears no more.
	shown.set(idOf("a"), false, rvOf(now()))
	next(w, watch.Deleted, "a-one")
	put("a", "a-two", "x")
	put("b", "b-three", "x")
	next(w, watch.Added, "b-three")

	// A watch from the first list, where Shown cannot tell it what changed
	// since, is refused.
	if _, err := s.Watch(ctx, prefix, storage.ListOptions{ResourceVersion: listed, Recursive: true, Predicate: pred}); !apierrors.IsResourceExpired(err) {
		t.Fatalf("a watch from before a change of what is shown: %v, want 410", err)
	}
	// A watch from "now" knows where its stream is only at a bookmark.
	fromNow, err := s.Watch(ctx, prefix, storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: pred})
	if err != nil {
		t.Fatal(err)
	}
	defer fromNow.Stop()
	next(fromNow, watch.Added, "b-one")
	shown.set(idOf("a"), true, rvOf(now()))
	for ended := false; !ended; {
		select {
		case e, ok := <-fromNow.ResultChan():
			if !ok {
				t.Fatal("the watch from now ended without an error")
			}
			if status, isStatus := e.Object.(*metav1.Status); e.Type == watch.Error {
				if !isStatus || status.Code != 410 {
					t.Fatalf("the watch from now ended with %v, want 410", e.Object)
				}
				ended = true
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the watch from now goes on after a change it cannot place")
		}
	}

	w.Stop()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return shown.subscribers() == 0, nil
	}); err != nil {
		t.Fatal("a stopped watch still listens for changes of what is shown")
	}
}
