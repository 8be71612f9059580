package tenantstorage

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Shown tells the all-projects view which projects' objects of a resource it
// shows (package catalog: those that enabled the Service listing it).
type Shown interface {
	// ProjectsShown returns whether a project's objects of gr are shown, by
	// its storage id; nil when every project's are.
	ProjectsShown(gr schema.GroupResource) func(projectID string) bool
	// OnShownChange calls changed with a project's storage id whenever
	// whether its objects of gr are shown changes, until the function it
	// returns is called; changed must not block. fresh is false when what
	// is shown changed after resource version since (when not 0): a watch
	// from since would miss it.
	OnShownChange(gr schema.GroupResource, since uint64, changed func(projectID string)) (stop func(), fresh bool)
}

// errShownChanged ends, or refuses, an all-projects watch that cannot show a
// change of which projects it shows: its client lists again.
func errShownChanged(why string) *apierrors.StatusError {
	return apierrors.NewResourceExpired("the projects this view shows changed " + why + "; list again")
}

// narrowed reports whether an all-projects read is narrowed by Shown: one
// by anyone but a superuser, on a server with a catalog.
func (s *store) narrowed(ctx context.Context) bool {
	return s.shown != nil && tenancy.From(ctx).Kind == tenancy.AllProjects && !tenancy.Superuser(ctx)
}

// projectsShown returns, for a narrowed read, which projects' objects it
// shows; nil for all.
func (s *store) projectsShown(ctx context.Context) func(string) bool {
	if !s.narrowed(ctx) {
		return nil
	}
	return s.shown.ProjectsShown(s.resource)
}

// watchShown opens an all-projects watch of what shown allows (nil: every
// project), at asked, the options the client asked with, which a replay of
// a project's objects keeps (its selectors). The changes of what is shown
// since the client's resource version are replayed first; a watch from a
// version whose changes Shown cannot tell is refused (410).
func (s *store) watchShown(ctx context.Context, key string, opts, asked storage.ListOptions, shown func(string) bool) (watch.Interface, error) {
	since, _ := strconv.ParseUint(asked.ResourceVersion, 10, 64)
	w := &shownWatch{shown: shown, result: make(chan watch.Event), done: make(chan struct{}), wake: make(chan struct{}, 1),
		maxReplay: s.maxListItems}
	if w.maxReplay <= 0 {
		w.maxReplay = DefaultMaxListItems
	}
	if asked.SendInitialEvents != nil && *asked.SendInitialEvents {
		// The initial state is what is shown now: nothing before it to tell.
		since = 0
	}
	// Events follow since: the stream is there from the start.
	w.at = since
	// Subscribed before the watch starts: a change after since, before or
	// after it opens, is either refused here or replayed. Every project
	// shown (no filter), only since is checked.
	changed := w.changedProject
	if shown == nil {
		changed = nil
	}
	stop, fresh := s.shown.OnShownChange(s.resource, since, changed)
	if !fresh {
		stop()
		return nil, errShownChanged("since resource version " + asked.ResourceVersion)
	}
	inner, err := s.Interface.Watch(ctx, key, opts)
	if err != nil || shown == nil {
		// Every project shown: nothing to replay.
		stop()
		return inner, err
	}
	w.inner, w.unsubscribe = inner, stop
	w.replay = func(projectID string, rv uint64) ([]runtime.Object, error) {
		return s.projectObjects(ctx, projectID, asked, rv, w.maxReplay)
	}
	if asked.Predicate.AllowWatchBookmarks && s.newFunc != nil {
		w.bookmark = func(rv uint64) (runtime.Object, bool) {
			obj := s.newFunc()
			return obj, (storage.APIObjectVersioner{}).UpdateObject(obj, rv) == nil
		}
	}
	go w.run()
	return w, nil
}

// projectObjects lists one project's objects that opts select, as they were
// at resource version rv: at most max of them.
func (s *store) projectObjects(ctx context.Context, projectID string, opts storage.ListOptions, rv uint64, most int64) ([]runtime.Object, error) {
	ctx = ServerRead(tenancy.WithTenant(ctx, tenancy.Tenant{Kind: tenancy.Project, ID: projectID}))
	p := opts.Predicate
	p.Limit, p.Continue = most+1, ""
	list := s.newList()
	if err := s.GetList(ctx, s.prefix, storage.ListOptions{ResourceVersion: strconv.FormatUint(rv, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact,
		Recursive: true, Predicate: p}, list); err != nil {
		return nil, err
	}
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return nil, err
	}
	if int64(len(items)) > most {
		return nil, fmt.Errorf("more than %d objects to replay", most)
	}
	return items, nil
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
// service) has its objects sent as ADDED, and one whose objects become
// hidden has them sent as DELETED, as they were at the point of the stream
// the watch has reached: the events after it follow as usual, so a client's
// cache holds exactly the shown projects' objects without listing again.
// Before the watch knows its point in the stream (a watch from "now" that
// has seen no bookmark yet), or when a replay cannot be read, it ends with
// 410 and its client lists again.
type shownWatch struct {
	inner  watch.Interface
	shown  func(string) bool
	result chan watch.Event
	done   chan struct{}
	stop   sync.Once
	// unsubscribe ends the notices of changes of what is shown.
	unsubscribe func()
	// replay lists a project's objects as the watch shows them, as they
	// were at a resource version; maxReplay bounds how many.
	replay    func(projectID string, rv uint64) ([]runtime.Object, error)
	maxReplay int64
	// bookmark, when the client asked for bookmarks, makes one at a
	// resource version.
	bookmark func(rv uint64) (runtime.Object, bool)
	// at is the resource version the stream has reached (0: not known),
	// read and written by run only.
	at uint64

	mu sync.Mutex
	// changed holds the projects whose showing changed, not yet replayed;
	// wake tells run there are some.
	changed map[string]bool
	wake    chan struct{}
}

// changedProject records that whether a project's objects are shown
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
	defer w.unsubscribe()
	for {
		select {
		case e, ok := <-w.inner.ResultChan():
			if !ok {
				return
			}
			// Changes recorded before this event are replayed before it,
			// at the point the stream has reached.
			if !w.replayChanged() {
				return
			}
			switch e.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				project := segmentOf(e.Object)
				shown := w.shown(project)
				for w.pending(project) {
					// Its showing changed while this event was judged
					// (the catalog records the change before anyone can
					// see it): replayed before the event, which is judged
					// again.
					if !w.replayChanged() {
						return
					}
					shown = w.shown(project)
				}
				if shown && !w.send(e) {
					return
				}
				if w.at != 0 {
					// (Before a known point, these may be the initial
					// state's objects, whose versions are no point of
					// the stream.)
					w.at = max(w.at, resourceVersionOf(e.Object))
				}
			case watch.Bookmark:
				if !w.send(e) {
					return
				}
				w.at = max(w.at, resourceVersionOf(e.Object))
			default:
				if !w.send(e) {
					return
				}
			}
		case <-w.wake:
			if !w.replayChanged() {
				return
			}
		}
	}
}

// pending reports whether a change of the project's showing waits to be replayed.
func (w *shownWatch) pending(project string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed[project]
}

func (w *shownWatch) send(e watch.Event) bool {
	select {
	case w.result <- e:
		return true
	case <-w.done:
		return false
	}
}

// replayChanged sends, for every project whose showing changed, its objects
// as ADDED or DELETED, as they were where the stream is; false when the
// watch ends.
func (w *shownWatch) replayChanged() bool {
	w.mu.Lock()
	changed := w.changed
	w.changed = nil
	w.mu.Unlock()
	for project := range changed {
		if w.at == 0 {
			w.send(watch.Event{Type: watch.Error, Object: &errShownChanged("before this watch reached a known resource version").ErrStatus})
			return false
		}
		shown := w.shown(project)
		objs, err := w.replay(project, w.at)
		if err != nil {
			klog.V(2).InfoS("Ending an all-projects watch: a project's objects could not be replayed", "err", err)
			w.send(watch.Event{Type: watch.Error, Object: &errShownChanged("and could not be replayed").ErrStatus})
			return false
		}
		typ := watch.Added
		if !shown {
			typ = watch.Deleted
		}
		for _, obj := range objs {
			if !w.send(watch.Event{Type: typ, Object: obj}) {
				return false
			}
		}
		if w.bookmark != nil && len(objs) > 0 {
			// Back to where the stream is: the replayed objects' older
			// versions would otherwise be where its client resumes.
			if b, ok := w.bookmark(w.at); ok && !w.send(watch.Event{Type: watch.Bookmark, Object: b}) {
				return false
			}
		}
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
