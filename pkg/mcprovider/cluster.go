package mcprovider

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	miloclient "go.miloapis.com/milo/pkg/client"
)

// projectCluster is one project as a cluster: a view over the provider's
// shared cache and routed client. It holds the project's name and storage id
// and nothing else: engaging a project costs a few bytes.
type projectCluster struct {
	p       *Provider
	project miloclient.Project
}

var _ cluster.Cluster = (*projectCluster)(nil)

// GetHTTPClient is the provider's one HTTP client.
func (c *projectCluster) GetHTTPClient() *http.Client { return c.p.http }

// GetConfig is the configuration of the project's control plane.
func (c *projectCluster) GetConfig() *rest.Config {
	return miloclient.ProjectConfig(c.p.platform, c.project.Name)
}

// GetCache is the project's view of the shared cache.
func (c *projectCluster) GetCache() crcache.Cache { return projectCache{p: c.p, id: c.project.ID} }

// GetScheme is the provider's scheme.
func (c *projectCluster) GetScheme() *runtime.Scheme { return c.p.scheme }

// GetClient reads from the project's view of the shared cache and writes to
// the project, refused (404) if the project of that name is a later one.
func (c *projectCluster) GetClient() client.Client {
	return projectClient{Client: c.p.client, reader: c.GetCache(), project: c.project}
}

// GetAPIReader reads from the project's control plane directly.
func (c *projectCluster) GetAPIReader() client.Reader {
	return projectClient{Client: c.p.client, reader: c.p.client, project: c.project}
}

// GetFieldIndexer indexes the shared cache (Provider.IndexField).
func (c *projectCluster) GetFieldIndexer() client.FieldIndexer { return c.p }

// GetRESTMapper is the provider's REST mapper (the platform's kinds).
func (c *projectCluster) GetRESTMapper() meta.RESTMapper { return c.p.mapper }

// Start does nothing until ctx ends: the provider runs what the project's view reads.
func (c *projectCluster) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// GetEventRecorderFor records events in the project, written as they happen
// (no broadcaster, and so no goroutine, per project).
func (c *projectCluster) GetEventRecorderFor(name string) record.EventRecorder {
	return recorder{c: c, component: name}
}

// GetEventRecorder is GetEventRecorderFor for the events API's recorder interface.
func (c *projectCluster) GetEventRecorder(name string) events.EventRecorder {
	return eventsRecorder{recorder{c: c, component: name}}
}

// projectClient is the provider's routed client bound to one project.
type projectClient struct {
	client.Client
	reader  client.Reader
	project miloclient.Project
}

func (c projectClient) in(ctx context.Context) context.Context {
	return miloclient.WithProject(ctx, c.project)
}

func (c projectClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.reader.Get(c.in(ctx), key, obj, opts...)
}

func (c projectClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.reader.List(c.in(ctx), list, opts...)
}

func (c projectClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.Client.Create(c.in(ctx), obj, opts...)
}

func (c projectClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.Client.Delete(c.in(ctx), obj, opts...)
}

func (c projectClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.Client.Update(c.in(ctx), obj, opts...)
}

func (c projectClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.Client.Patch(c.in(ctx), obj, patch, opts...)
}

func (c projectClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return c.Client.Apply(c.in(ctx), obj, opts...)
}

func (c projectClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return c.Client.DeleteAllOf(c.in(ctx), obj, opts...)
}

func (c projectClient) Status() client.SubResourceWriter { return c.SubResource("status") }

func (c projectClient) SubResource(subResource string) client.SubResourceClient {
	return projectSubResource{SubResourceClient: c.Client.SubResource(subResource), project: c.project}
}

// projectSubResource is a subresource client bound to one project.
type projectSubResource struct {
	client.SubResourceClient
	project miloclient.Project
}

func (s projectSubResource) in(ctx context.Context) context.Context {
	return miloclient.WithProject(ctx, s.project)
}

func (s projectSubResource) Get(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceGetOption) error {
	return s.SubResourceClient.Get(s.in(ctx), obj, sub, opts...)
}

func (s projectSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.SubResourceClient.Create(s.in(ctx), obj, sub, opts...)
}

func (s projectSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.SubResourceClient.Update(s.in(ctx), obj, opts...)
}

func (s projectSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.SubResourceClient.Patch(s.in(ctx), obj, patch, opts...)
}

func (s projectSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return s.SubResourceClient.Apply(s.in(ctx), obj, opts...)
}

// recorder writes core/v1 Events about objects of one project into it.
type recorder struct {
	c         *projectCluster
	component string
}

func (r recorder) write(regarding runtime.Object, eventType, reason, action, message string) {
	m, err := meta.Accessor(regarding)
	if err != nil {
		return
	}
	gvk := regarding.GetObjectKind().GroupVersionKind()
	now := metav1.Now()
	ns := m.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: m.GetName() + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()},
		Reason: reason, Message: message, Type: eventType, Action: action,
		Source:         corev1.EventSource{Component: r.component},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: r.component,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.GetClient().Create(ctx, ev); err != nil {
		klog.V(2).InfoS("Recording an event", "project", r.c.project.Name, "object", klog.KObj(m), "reason", reason, "err", err)
	}
}

func (r recorder) Event(object runtime.Object, eventType, reason, message string) {
	r.write(object, eventType, reason, "", message)
}

func (r recorder) Eventf(object runtime.Object, eventType, reason, messageFmt string, args ...any) {
	r.write(object, eventType, reason, "", fmt.Sprintf(messageFmt, args...))
}

func (r recorder) AnnotatedEventf(object runtime.Object, _ map[string]string, eventType, reason, messageFmt string, args ...any) {
	r.write(object, eventType, reason, "", fmt.Sprintf(messageFmt, args...))
}

// eventsRecorder is the events API's recorder interface over the same writes.
type eventsRecorder struct{ r recorder }

func (e eventsRecorder) Eventf(regarding, _ runtime.Object, eventType, reason, action, note string, args ...any) {
	e.r.write(regarding, eventType, reason, action, fmt.Sprintf(note, args...))
}
