package tenantstorage

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Shown tells the all-projects view which projects' objects of a resource it
// shows (package catalog: those that enabled the Service listing it).
type Shown interface {
	// ProjectsShown returns whether a project's objects of gr are shown, by
	// its storage id; nil when every project's are.
	ProjectsShown(gr schema.GroupResource) func(projectID string) bool
}

// projectsShown returns, for an all-projects read by anyone but a superuser,
// which projects' objects it shows; nil for all.
func (s *store) projectsShown(ctx context.Context) func(string) bool {
	if s.shown == nil || tenancy.From(ctx).Kind != tenancy.AllProjects || tenancy.Superuser(ctx) {
		return nil
	}
	return s.shown.ProjectsShown(s.resource)
}

// shownList serves an all-projects LIST of the objects shown allows. Pages
// are read until the limit asked for is filled with shown objects (or there
// are no more), and the continue token names the last object returned: a
// token made by the storage would name the last key it examined, which may
// be a hidden project's object.
func (s *store) shownList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object, shown func(string) bool) error {
	limit := opts.Predicate.Limit
	var kept []runtime.Object
	var rv, next string
	page := listObj
	for {
		if err := s.Interface.GetList(ctx, key, opts, page); err != nil {
			return err
		}
		items, err := meta.ExtractListWithAlloc(page)
		if err != nil {
			return err
		}
		for _, item := range items {
			if shown(segmentOf(item)) {
				kept = append(kept, item)
			}
		}
		l, err := meta.ListAccessor(page)
		if err != nil {
			return err
		}
		if rv == "" {
			rv = l.GetResourceVersion()
		}
		next = l.GetContinue()
		if next == "" || limit <= 0 || int64(len(kept)) >= limit {
			break
		}
		// The next page, at the first one's resource version (the token's),
		// larger: a small limit over many hidden objects must not cost a
		// read per object.
		opts.Predicate.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = next, "", ""
		opts.Predicate.Limit = max(opts.Predicate.Limit*2, 500)
		page = s.newList()
	}
	token := ""
	if limit > 0 && int64(len(kept)) >= limit && (next != "" || int64(len(kept)) > limit) {
		kept = kept[:limit]
		last, err := s.keyFunc(kept[len(kept)-1])
		if err != nil {
			return err
		}
		version, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			return err
		}
		// Relative to the list's key prefix, after the last object returned.
		if token, err = storage.EncodeContinue("/"+strings.TrimPrefix(last, s.prefix+"/")+"\x00", "/", version); err != nil {
			return err
		}
	}
	if err := meta.SetList(listObj, kept); err != nil {
		return err
	}
	l, err := meta.ListAccessor(listObj)
	if err != nil {
		return err
	}
	l.SetResourceVersion(rv)
	l.SetContinue(token)
	l.SetRemainingItemCount(nil)
	return nil
}

// shownWatch passes on the events of objects shown allows, judged event by
// event: a project that enables the service later has its new events shown
// from then on. Bookmarks and errors pass.
type shownWatch struct {
	inner  watch.Interface
	shown  func(string) bool
	result chan watch.Event
	done   chan struct{}
	stop   sync.Once
}

func newShownWatch(inner watch.Interface, shown func(string) bool) watch.Interface {
	w := &shownWatch{inner: inner, shown: shown, result: make(chan watch.Event), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *shownWatch) run() {
	defer close(w.result)
	for e := range w.inner.ResultChan() {
		switch e.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			if !w.shown(segmentOf(e.Object)) {
				continue
			}
		}
		select {
		case w.result <- e:
		case <-w.done:
			return
		}
	}
}

func (w *shownWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop ends the watch, whether or not its consumer still reads: the
// goroutine forwarding events never outlives it.
func (w *shownWatch) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.inner.Stop()
	})
}
