package tenantstorage

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// OnShownChange calls changed with a project's storage id whenever
	// whether its objects of gr are shown may have changed, until the
	// function it returns is called. changed must not block.
	OnShownChange(gr schema.GroupResource, changed func(projectID string)) (stop func())
}

// projectsShown returns, for an all-projects read by anyone but a superuser,
// which projects' objects it shows; nil for all.
func (s *store) projectsShown(ctx context.Context) func(string) bool {
	if s.shown == nil || tenancy.From(ctx).Kind != tenancy.AllProjects || tenancy.Superuser(ctx) {
		return nil
	}
	return s.shown.ProjectsShown(s.resource)
}

// shownWatch wraps an all-projects watch of what shown allows; asked are the
// options the client asked with, which a replay of a project's objects
// keeps (its selectors).
func (s *store) shownWatch(ctx context.Context, inner watch.Interface, asked storage.ListOptions, shown func(string) bool) watch.Interface {
	w := newShownWatch(inner, shown)
	w.replay = func(projectID string) ([]runtime.Object, uint64, error) {
		return s.projectObjects(ctx, projectID, asked)
	}
	w.bookmark = func(rv uint64) (runtime.Object, bool) {
		if !asked.Predicate.AllowWatchBookmarks || s.newFunc == nil {
			return nil, false
		}
		obj := s.newFunc()
		if err := (storage.APIObjectVersioner{}).UpdateObject(obj, rv); err != nil {
			return nil, false
		}
		return obj, true
	}
	w.start(func(changed func(string)) func() { return s.shown.OnShownChange(s.resource, changed) })
	return w
}

// projectObjects lists one project's objects that opts select, from the
// watch cache as it is now: at a resource version not older than any event
// the cache has sent its watchers.
func (s *store) projectObjects(ctx context.Context, projectID string, opts storage.ListOptions) ([]runtime.Object, uint64, error) {
	ctx = ServerRead(tenancy.WithTenant(ctx, tenancy.Tenant{Kind: tenancy.Project, ID: projectID}))
	p := opts.Predicate
	p.Limit, p.Continue = 0, ""
	list := s.newList()
	if err := s.GetList(ctx, s.prefix, storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: p}, list); err != nil {
		return nil, 0, err
	}
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return nil, 0, err
	}
	l, err := meta.ListAccessor(list)
	if err != nil {
		return nil, 0, err
	}
	rv, err := strconv.ParseUint(l.GetResourceVersion(), 10, 64)
	return items, rv, err
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

// shownWatch passes on the events of objects shown allows. A project whose
// objects become shown while the watch is open (its project enabled the
// service) has its objects sent as ADDED, as they are then; one whose objects
// become hidden has them sent as DELETED: a client's cache holds exactly the
// shown projects' objects without listing again. Events the watch had not yet
// passed on when a project changed are judged against that replay: older
// than it, they are dropped (an ADDED replay holds them), except deletions of
// a project just hidden, which the client may hold.
type shownWatch struct {
	inner  watch.Interface
	shown  func(string) bool
	result chan watch.Event
	done   chan struct{}
	stop   sync.Once
	// unsubscribe ends the notices of changes of what is shown.
	unsubscribe func()
	// replay lists a project's objects as the watch would show them, at a
	// resource version not older than any event the watch has received;
	// bookmark makes a bookmark event at a resource version.
	replay   func(projectID string) ([]runtime.Object, uint64, error)
	bookmark func(rv uint64) (runtime.Object, bool)

	mu sync.Mutex
	// changed holds the projects whose showing changed, not yet replayed;
	// wake tells run there are some.
	changed map[string]bool
	wake    chan struct{}
}

// replayed is what the watch sent for a project when its showing changed.
type replayed struct {
	rv    uint64
	shown bool
}

func newShownWatch(inner watch.Interface, shown func(string) bool) *shownWatch {
	return &shownWatch{inner: inner, shown: shown, result: make(chan watch.Event), done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// start runs the watch; subscribe registers for notices of what is shown
// (the function it is given must not block) and returns how to end them.
func (w *shownWatch) start(subscribe func(changed func(projectID string)) func()) {
	if subscribe != nil {
		w.unsubscribe = subscribe(w.changedProject)
	}
	go w.run()
}

// changedProject records that whether a project's objects are shown may have
// changed. It never blocks: it is called under the catalog's lock.
func (w *shownWatch) changedProject(projectID string) {
	w.mu.Lock()
	if w.changed == nil {
		w.changed = map[string]bool{}
	}
	w.changed[projectID] = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *shownWatch) run() {
	defer close(w.result)
	defer func() {
		if w.unsubscribe != nil {
			w.unsubscribe()
		}
	}()
	replays := map[string]replayed{}
	send := func(e watch.Event) bool {
		select {
		case w.result <- e:
			return true
		case <-w.done:
			return false
		}
	}
	for {
		var e watch.Event
		var ok bool
		select {
		case e, ok = <-w.inner.ResultChan():
			if !ok {
				return
			}
		case <-w.wake:
			if !w.replayChanged(replays, send) {
				return
			}
			continue
		}
		if e.Type != watch.Added && e.Type != watch.Modified && e.Type != watch.Deleted {
			if !send(e) {
				return
			}
			continue
		}
		// Judged before the changes are replayed: a change recorded after
		// this judgement has a replay that covers the event.
		project := segmentOf(e.Object)
		shown := w.shown(project)
		if !w.replayChanged(replays, send) {
			return
		}
		rv := resourceVersionOf(e.Object)
		if r, ok := replays[project]; ok && rv <= r.rv {
			shown = !r.shown && e.Type == watch.Deleted
		}
		// Once the stream is past a replay, later events are judged as usual.
		for p, r := range replays {
			if rv > r.rv {
				delete(replays, p)
			}
		}
		if shown && !send(e) {
			return
		}
	}
}

// replayChanged sends, for every project whose showing changed, its objects
// as ADDED or DELETED, and records the replay; false when the watch ends.
func (w *shownWatch) replayChanged(replays map[string]replayed, send func(watch.Event) bool) bool {
	w.mu.Lock()
	changed := w.changed
	w.changed = nil
	w.mu.Unlock()
	for project := range changed {
		shown := w.shown(project)
		objs, rv, err := w.replay(project)
		if err != nil {
			// The client lists again, as after a compaction.
			send(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired(
				fmt.Sprintf("the projects this watch shows changed and could not be replayed (%v); list again", err)).ErrStatus})
			return false
		}
		typ := watch.Added
		if !shown {
			typ = watch.Deleted
		}
		for _, obj := range objs {
			if !send(watch.Event{Type: typ, Object: obj}) {
				return false
			}
		}
		if b, ok := w.bookmark(rv); ok && len(objs) > 0 {
			// Back to the stream's resource version, which the replayed
			// objects' older ones would otherwise set back.
			if !send(watch.Event{Type: watch.Bookmark, Object: b}) {
				return false
			}
		}
		replays[project] = replayed{rv: rv, shown: shown}
	}
	return true
}

func resourceVersionOf(obj runtime.Object) uint64 {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	rv, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	return rv
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
