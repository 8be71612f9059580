// Package allprojects gives Milo's controllers one shared informer per
// resource for every project at once, over the all-projects view, and clients
// of one project at a time over one shared HTTP transport.
//
// The objects of two projects may share a namespace and name: an informer's
// store keys objects by namespace and name, so the informers here qualify each
// object's namespace with its project's storage id (see Qualify) before it is
// stored. Work queues are keyed by Key: project, namespace, name.
package allprojects

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/client"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Clients builds clients of the platform, of one project and of the
// all-projects view from one configuration and one HTTP transport: a
// project's client is a value made per work item, never kept per project.
type Clients struct {
	base *rest.Config
	http *http.Client

	sharedMu sync.Mutex
	shared   map[sharedKey]cache.SharedIndexInformer // see MetadataInformer
}

// NewClients prepares clients from the configuration of the platform. No
// client-side rate limit applies: the controllers' fixed worker pools bound
// what they ask of the server.
func NewClients(platform *rest.Config) (*Clients, error) {
	base := rest.CopyConfig(platform)
	base.QPS, base.Burst = -1, -1
	base.Wrap(func(rt http.RoundTripper) http.RoundTripper { return expectProject{rt} })
	hc, err := rest.HTTPClientFor(base)
	if err != nil {
		return nil, err
	}
	return &Clients{base: base, http: hc}, nil
}

// HTTPClient is the shared transport, for building any client of Config's.
func (c *Clients) HTTPClient() *http.Client { return c.http }

// Config is the configuration of the control plane of project ("" for the
// platform). Its host carries the project's URL prefix.
func (c *Clients) Config(project string) *rest.Config {
	if project == "" {
		return rest.CopyConfig(c.base)
	}
	return client.ProjectConfig(c.base, project)
}

// AllProjectsConfig is the configuration of the all-projects view (list and watch only).
func (c *Clients) AllProjectsConfig() *rest.Config {
	return client.AllProjectsConfig(c.base)
}

// Within returns a context whose requests through these clients are refused
// (404) unless they reach the project of key by its storage id, not merely by
// its name: work queued for a deleted project never reaches a later one of
// the same name.
func Within(ctx context.Context, key Key) context.Context {
	if key.Project == "" || key.ID == "" {
		return ctx
	}
	return context.WithValue(ctx, projectIDKey{}, key.ID)
}

type projectIDKey struct{}

// expectProject sends the storage id Within put in a request's context.
type expectProject struct{ rt http.RoundTripper }

func (e expectProject) RoundTrip(req *http.Request) (*http.Response, error) {
	if id, ok := req.Context().Value(projectIDKey{}).(string); ok {
		req = req.Clone(req.Context())
		req.Header.Set(tenancy.ExpectedProjectIDHeader, id)
	}
	return e.rt.RoundTrip(req)
}

// Key names one object of one project (Project "" for the platform).
type Key struct {
	// Project is the project's name; ID its storage id, which tells a project
	// from a later one of the same name.
	Project, ID     string
	Namespace, Name string
}

// TenantKeys returns the key's project, for traces and logs.
func (k Key) TenantKeys() (project, organization string) { return k.Project, "" }

// String renders the key for logs.
func (k Key) String() string {
	p := k.Project
	if p == "" {
		p = "platform"
	}
	if k.Namespace == "" {
		return p + ":" + k.Name
	}
	return p + ":" + k.Namespace + "/" + k.Name
}

// separator joins a project's storage id, its name and a namespace in a
// qualified namespace. None of them contains it.
const separator = "/"

// Qualify is the informers' transform for the all-projects view: it makes an
// object's namespace "<storage id>/<project>/<namespace>" ("<storage
// id>/<project>" for a cluster-scoped object), so that the store keys of two
// projects' objects never collide and the key alone names the project
// (KeyOf); the tenancy annotations, which it reads the project from, go, so
// that applying it again changes nothing.
func Qualify(obj any) (any, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	annotations := m.GetAnnotations()
	if project := annotations[tenancy.AnnotationKey]; project != "" {
		id := annotations[tenancy.IDAnnotationKey]
		if id == "" {
			id = project // a project stored before storage ids
		}
		q := id + separator + project
		if ns := m.GetNamespace(); ns != "" {
			q += separator + ns
		}
		m.SetNamespace(q)
		// The key holds the project now; without the annotations a second
		// application (client-go applies an informer's transform twice to a
		// watch-list's objects) leaves the object as it is.
		var others map[string]string
		for k, v := range annotations {
			if k != tenancy.AnnotationKey && k != tenancy.IDAnnotationKey {
				if others == nil {
					others = map[string]string{}
				}
				others[k] = v
			}
		}
		m.SetAnnotations(others)
	}
	m.SetManagedFields(nil)
	return obj, nil
}

// KeyOf returns the key of an object from a Qualify'd informer (or a platform
// informer, whose objects are not qualified), also from a deletion tombstone.
func KeyOf(obj any, clusterScoped bool) (Key, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return Key{}, false
	}
	k := Key{Name: m.GetName()}
	id, rest, qualified := strings.Cut(m.GetNamespace(), separator)
	if !qualified { // a platform object: no namespace of the platform holds the separator
		k.Namespace = id
		return k, true
	}
	k.ID = id
	k.Project, k.Namespace, _ = strings.Cut(rest, separator)
	if clusterScoped {
		k.Namespace = ""
	}
	return k, true
}

// StoreKey is where a Qualify'd informer keeps the object of k.
func (k Key) StoreKey() string {
	ns := k.Namespace
	if k.Project != "" {
		ns = k.ID + separator + k.Project
		if k.Namespace != "" {
			ns += separator + k.Namespace
		}
	}
	if ns == "" {
		return k.Name
	}
	return ns + "/" + k.Name
}

// ResourceLists keeps one discovery answer for a few seconds: every project
// serves the same kinds, so one answer serves every project's work item.
type ResourceLists struct {
	// Namespaced keeps only namespaced resources.
	Namespaced bool

	mu    sync.Mutex
	lists []*metav1.APIResourceList
	at    time.Time
}

// Invalidate drops the kept answer: the next Get asks the server.
func (r *ResourceLists) Invalidate() {
	r.mu.Lock()
	r.lists = nil
	r.mu.Unlock()
}

// Get returns the preferred resources of the server client reaches, from
// the kept answer when it is fresh. A partial answer (a group failing
// discovery) is returned with its error and not kept.
func (r *ResourceLists) Get(client func() (discovery.DiscoveryInterface, error)) ([]*metav1.APIResourceList, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lists != nil && time.Since(r.at) < 10*time.Second {
		return r.lists, nil
	}
	disco, err := client()
	if err != nil {
		return nil, err
	}
	var lists []*metav1.APIResourceList
	if r.Namespaced {
		lists, err = discovery.ServerPreferredNamespacedResources(disco)
	} else {
		lists, err = disco.ServerPreferredResources()
	}
	if err == nil {
		r.lists, r.at = lists, time.Now()
	}
	return lists, err
}
