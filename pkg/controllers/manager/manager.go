// Package manager runs Milo's controllers: a registry of named controllers,
// selected as kube-controller-manager selects its own (--controllers=*,-name),
// each built once from what they share — the platform's client configuration,
// the hierarchy's shared informers, and clients of any project over one
// transport — and run together for as long as their instance leads.
package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/events"
)

// Shared is what every controller is built from.
type Shared struct {
	// Config reaches the platform as a platform superuser.
	Config *rest.Config
	// Hierarchy is the shared informer factory of Milo's own kinds.
	Hierarchy dynamicinformer.DynamicSharedInformerFactory
	// Clients reach the platform, any project and the all-projects view over one transport.
	Clients *allprojects.Clients
	// Workers is how many objects each controller works on at once.
	Workers int
	// Events records the controllers' Events while they run.
	Events *events.Recorder
	// RootCA is the PEM bundle of the CA clients verify the server with,
	// published in every namespace as kube-root-ca.crt.
	RootCA []byte
	// StoredByResource, when the controllers run inside the API server,
	// counts a project's objects of each of resources directly in storage,
	// by the project's storage id, leaving out those it cannot count; nil
	// in a controller manager of its own.
	StoredByResource func(ctx context.Context, projectID string, resources []schema.GroupResource) (counts map[schema.GroupResource]int64, revision int64, err error)
	// Purge, when the controllers run inside the API server, removes every
	// key of a deleted project by its storage id, as the server's Purger
	// does — with since (not 0), only if none was written after that
	// revision (tenantstorage.PurgeUnchanged); nil in a controller manager
	// of its own.
	Purge func(ctx context.Context, projectID string, since int64) error
	// OrganizationGone, when the controllers run inside the API server,
	// removes what the server keeps in storage for an organization whose
	// contents are all gone, before it is released (its Projects' quota
	// counts); nil where there is nothing to remove, or in a controller
	// manager of its own.
	OrganizationGone func(ctx context.Context, org string) error
}

// Runner is a built controller: Run works until ctx ends and returns once it
// has stopped acting, so that an instance that loses leadership stops before
// another one starts.
type Runner interface {
	Run(ctx context.Context)
}

// RunFunc adapts a function to Runner.
type RunFunc func(ctx context.Context)

// Run implements Runner.
func (f RunFunc) Run(ctx context.Context) { f(ctx) }

// Builder builds one controller.
type Builder func(Shared) (Runner, error)

// Registry names every controller Milo has.
type Registry map[string]Builder

// Names returns the registered names, sorted.
func (r Registry) Names() []string {
	names := make([]string, 0, len(r))
	for n := range r {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Select resolves a kube-controller-manager style selection: "*" is every
// controller, "name" adds one, "-name" removes one. An unknown name is an error.
func (r Registry) Select(selection []string) ([]string, error) {
	var chosen []string
	all := false
	var excluded []string
	for _, s := range selection {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
		case s == "*":
			all = true
		case strings.HasPrefix(s, "-"):
			if _, ok := r[s[1:]]; !ok {
				return nil, fmt.Errorf("unknown controller %q (known: %s)", s[1:], strings.Join(r.Names(), ", "))
			}
			excluded = append(excluded, s[1:])
		default:
			if _, ok := r[s]; !ok {
				return nil, fmt.Errorf("unknown controller %q (known: %s)", s, strings.Join(r.Names(), ", "))
			}
			chosen = append(chosen, s)
		}
	}
	if all {
		chosen = r.Names()
	}
	chosen = slices.DeleteFunc(slices.Compact(sortedCopy(chosen)), func(n string) bool { return slices.Contains(excluded, n) })
	return chosen, nil
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}

// Manager is a set of built controllers.
type Manager struct {
	names   []string
	runners []Runner
	events  *events.Recorder
}

// New builds the selected controllers of registry.
func New(registry Registry, selection []string, shared Shared) (*Manager, error) {
	names, err := registry.Select(selection)
	if err != nil {
		return nil, err
	}
	if shared.Clients == nil {
		if shared.Clients, err = allprojects.NewClients(shared.Config); err != nil {
			return nil, err
		}
	}
	if shared.Workers < 1 {
		shared.Workers = 1
	}
	if shared.Events == nil {
		shared.Events = events.New(shared.Clients)
	}
	m := &Manager{names: names, events: shared.Events}
	for _, n := range names {
		r, err := registry[n](shared)
		if err != nil {
			return nil, fmt.Errorf("building controller %s: %w", n, err)
		}
		m.runners = append(m.runners, r)
	}
	return m, nil
}

// Names are the controllers the manager runs.
func (m *Manager) Names() []string { return m.names }

// Run runs every controller until ctx ends and returns once all have stopped.
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range m.runners {
		wg.Go(func() { r.Run(ctx) })
	}
	recording, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.events.Run(recording)
	}()
	wg.Wait()
	stop() // after the controllers, so that their last Events are recorded
	<-done
}

// Selection is the value of a --controllers flag: controller names separated
// by commas, "*" for every controller, "-name" to leave one out. "true" and
// "false" are "*" and none, so the flag also reads as a switch.
type Selection []string

// String implements pflag.Value.
func (s *Selection) String() string { return strings.Join(*s, ",") }

// Set implements pflag.Value.
func (s *Selection) Set(v string) error {
	switch strings.TrimSpace(v) {
	case "true":
		*s = Selection{"*"}
	case "false", "":
		*s = nil
	default:
		*s = strings.Split(v, ",")
	}
	return nil
}

// Type implements pflag.Value.
func (s *Selection) Type() string { return "strings" }

// RetryAfter is an error a sync returns to be looked at again after a delay
// (waiting for something that takes its time), rather than rate-limited.
type RetryAfter struct {
	After  time.Duration
	Reason string
}

func (r RetryAfter) Error() string { return r.Reason }

// Waiting is an error a sync returns while it waits for something a tenant
// controls (a finalizer of theirs): it is looked at again with the queue's
// growing backoff, so that no tenant can keep a worker busy by never letting go.
type Waiting struct{ Reason string }

func (w Waiting) Error() string { return w.Reason }

// Work runs workers that take keys from queue and sync them, until ctx ends,
// and returns once every worker has stopped. A key whose sync fails is retried
// with the queue's rate limit, or after RetryAfter's delay.
func Work[K comparable](ctx context.Context, name string, queue workqueue.TypedRateLimitingInterface[K], workers int, handle func(context.Context, K) error) {
	next := func(ctx context.Context) bool {
		key, quit := queue.Get()
		if quit {
			return false
		}
		defer queue.Done(key)
		ctx, end := Begin(ctx, name, key)
		err := handle(ctx, key)
		end(err)
		var retry RetryAfter
		var waiting Waiting
		switch {
		case errors.As(err, &retry):
			queue.AddAfter(key, retry.After)
		case errors.As(err, &waiting):
			queue.AddRateLimited(key)
		case err != nil && ctx.Err() == nil:
			klog.FromContext(ctx).Error(err, "Syncing")
			queue.AddRateLimited(key)
		default:
			queue.Forget(key)
		}
		return true
	}
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for next(ctx) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}

// NewQueue returns a rate-limited work queue named for its controller (the
// name labels its metrics), first in, first out.
func NewQueue[K comparable](name string) workqueue.TypedRateLimitingInterface[K] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[K](),
		workqueue.TypedRateLimitingQueueConfig[K]{Name: name})
}

// NewTenantQueue is NewQueue for keys that name their tenant: tenants are
// served in turn (fairQueue), so that one project's backlog does not hold
// up another's work.
func NewTenantQueue[K interface {
	comparable
	Tenanted
}](name string) workqueue.TypedRateLimitingInterface[K] {
	return NewFairQueue(name, tenantOf[K], workqueue.DefaultTypedControllerRateLimiter[K]())
}

// NewFairQueue is a rate-limited work queue (limiter) whose keys are served
// by tenant in turn (fairQueue): tenantOf names the tenant of a key ("": the
// platform's, one tenant of its own). It is called once as a key is queued,
// under the queue's lock, so it must be quick and must not touch the queue.
func NewFairQueue[K comparable](name string, tenantOf func(K) string, limiter workqueue.TypedRateLimiter[K]) workqueue.TypedRateLimitingInterface[K] {
	fair := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[K]{Name: name, Queue: newFairQueue(tenantOf)})
	return workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
		workqueue.TypedRateLimitingQueueConfig[K]{Name: name,
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[K]{Name: name, Queue: fair})})
}

// StartInformers registers handler on each informer, runs them until ctx ends
// and waits for their caches; false if ctx ended first or a handler could not
// be registered.
func StartInformers(ctx context.Context, name string, handler cache.ResourceEventHandler, informers ...cache.SharedIndexInformer) bool {
	var synced []cache.InformerSynced
	for _, inf := range informers {
		if handler != nil {
			if _, err := inf.AddEventHandler(handler); err != nil {
				klog.FromContext(ctx).Error(err, "Registering event handler", "controller", name)
				return false
			}
		}
		go inf.Run(ctx.Done())
		synced = append(synced, inf.HasSynced)
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}
