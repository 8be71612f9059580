package hierarchy

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/events"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/tenancy"
)

// PurgeFunc removes every remaining key of the project with the given storage id.
type PurgeFunc func(ctx context.Context, projectID string) error

// Purger is the last step of a project's deletion, and the only one that needs
// storage access, so it runs inside the API server whoever runs the
// controllers: once the controllers have emptied a deleted project and released
// it, the Purger removes its keys and then the Project's purge finalizer. Purges
// are idempotent, so several servers may run one.
type Purger struct {
	purge   PurgeFunc
	dynamic dynamic.Interface
	loop    *loop
	events  *events.Recorder
}

// NewPurger prepares a Purger over the server's loopback configuration (whose
// identity alone may remove the purge finalizer) and its hierarchy informers.
func NewPurger(loopback *rest.Config, factory dynamicinformer.DynamicSharedInformerFactory, purge PurgeFunc) (*Purger, error) {
	config := rest.CopyConfig(loopback)
	config.QPS, config.Burst = -1, -1 // bounded by the workers instead
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	clients, err := allprojects.NewClients(loopback)
	if err != nil {
		return nil, err
	}
	p := &Purger{purge: purge, dynamic: dyn, events: events.New(clients)}
	p.loop = newLoop("project-purge", factory.ForResource(projects).Informer(), p.sync)
	p.loop.events = p.events
	p.loop.idle = func(obj any) bool { m := hierarchy.Object(obj); return m == nil || !purgeable(m) }
	return p, nil
}

// purgeable reports whether a project waits for its purge: deleted, emptied
// (its ProjectFinalizer gone), and not purged yet.
func purgeable(project metav1.Object) bool {
	finalizers := project.GetFinalizers()
	return project.GetDeletionTimestamp() != nil && slices.Contains(finalizers, hierarchy.PurgeFinalizer) &&
		!slices.Contains(finalizers, hierarchy.ProjectFinalizer)
}

// Run purges with the given number of workers until ctx ends.
func (p *Purger) Run(ctx context.Context, workers int) {
	go p.events.Run(ctx)
	p.loop.run(ctx, workers)
}

func (p *Purger) sync(ctx context.Context, project *unstructured.Unstructured) error {
	if !purgeable(project) {
		return nil
	}
	start := time.Now()
	if err := p.purge(ctx, tenancy.StorageIDOf(project)); err != nil {
		return err
	}
	took := time.Since(start)
	// Every server purges (idempotently); the one whose removal of the
	// finalizer lands records it.
	removed, err := removedFinalizer(ctx, p.dynamic, projects, project, hierarchy.PurgeFinalizer)
	if !removed {
		return err
	}
	purgeDuration.Observe(took.Seconds())
	observeDeletion(project, stagePurged)
	p.events.HierarchyEventf(keyOf(project, "").organization, project, corev1.EventTypeNormal, "Purged", purgedMessage, project.GetName())
	return nil
}
