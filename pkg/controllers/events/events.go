// Package events records the Kubernetes Events of Milo's controllers — what
// users wait on — where the user looks: Events about an Organization, Folder or
// Project in the organization's namespace on the platform (read through the
// organization's context), Events about a project's own objects in that
// project. One broadcaster and one event cache serve every tenant; a project's
// client is a value made per Event over the shared transport.
package events

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Component is the source component of Milo's controllers' Events.
const Component = "milo-controller-manager"

// Recorder records Events while it runs (Run); outside of Run it drops them,
// so that an instance that is not the leader records nothing.
type Recorder struct {
	clients  *allprojects.Clients
	recorder atomic.Pointer[record.EventRecorderLogger]
}

// New returns a Recorder writing through clients.
func New(clients *allprojects.Clients) *Recorder { return &Recorder{clients: clients} }

// Run records Events until ctx ends. Events recorded before then are still
// written (Shutdown delivers what is queued; the writes do not end with ctx).
// Runs may follow one another (leadership regained); each stops only its own.
func (r *Recorder) Run(ctx context.Context) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(sink{ctx: context.WithoutCancel(ctx), clients: r.clients})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component})
	r.recorder.Store(&rec)
	<-ctx.Done()
	r.recorder.CompareAndSwap(&rec, nil)
	b.Shutdown()
}

// ProjectEventf records an Event about an object of project (storage id id;
// "" for the platform): ref names the object; Events about a cluster-scoped
// object go to the default namespace.
func (r *Recorder) ProjectEventf(project, id string, ref *corev1.ObjectReference, eventtype, reason, format string, args ...any) {
	rec := r.recorder.Load()
	if rec == nil {
		return
	}
	if project == "" {
		(*rec).Eventf(ref, eventtype, reason, format, args...)
		return
	}
	(*rec).AnnotatedEventf(ref, map[string]string{tenancy.AnnotationKey: project, tenancy.IDAnnotationKey: id}, eventtype, reason, format, args...)
}

// HierarchyEventf records an Event about an Organization, Folder or Project
// of organization org, in the organization's namespace on the platform.
func (r *Recorder) HierarchyEventf(org string, obj HierarchyObject, eventtype, reason, format string, args ...any) {
	rec := r.recorder.Load()
	if rec == nil || org == "" {
		return
	}
	ref := &corev1.ObjectReference{
		APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Name: obj.GetName(), UID: obj.GetUID(),
		ResourceVersion: obj.GetResourceVersion(),
		// Core Events live in their object's namespace; these objects are
		// cluster-scoped, and their organization's namespace is where their
		// owners read.
		Namespace: tenancy.OrganizationNamespace(org),
	}
	(*rec).Eventf(ref, eventtype, reason, format, args...)
}

// HierarchyObject is what HierarchyEventf needs of an object.
type HierarchyObject interface {
	runtime.Object
	GetAPIVersion() string
	GetKind() string
	GetName() string
	GetUID() types.UID
	GetResourceVersion() string
}

// sink writes each Event to the platform or to the project its annotation
// names, conditional on the project's storage id: an Event of a deleted
// project never lands in a later project of the same name.
type sink struct {
	ctx     context.Context
	clients *allprojects.Clients
}

func (s sink) target(e *corev1.Event) (context.Context, corev1client.CoreV1Interface, error) {
	project := e.Annotations[tenancy.AnnotationKey]
	ctx := allprojects.Within(s.ctx, allprojects.Key{Project: project, ID: e.Annotations[tenancy.IDAnnotationKey]})
	c, err := corev1client.NewForConfigAndClient(s.clients.Config(project), s.clients.HTTPClient())
	return ctx, c, err
}

func (s sink) Create(e *corev1.Event) (*corev1.Event, error) {
	ctx, c, err := s.target(e)
	if err != nil {
		return nil, err
	}
	out, err := c.Events(e.Namespace).CreateWithEventNamespaceWithContext(ctx, e)
	logFailure(ctx, err, e)
	return out, err
}

func (s sink) Update(e *corev1.Event) (*corev1.Event, error) {
	ctx, c, err := s.target(e)
	if err != nil {
		return nil, err
	}
	return c.Events(e.Namespace).UpdateWithEventNamespaceWithContext(ctx, e)
}

func (s sink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	ctx, c, err := s.target(e)
	if err != nil {
		return nil, err
	}
	return c.Events(e.Namespace).PatchWithEventNamespaceWithContext(ctx, e, data)
}

func logFailure(ctx context.Context, err error, e *corev1.Event) {
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Recording an Event failed", "project", e.Annotations[tenancy.AnnotationKey], "reason", e.Reason, "err", err)
	}
}
