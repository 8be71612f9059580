// Package client builds the clients a service needs to work in every project of
// a Milo server from one configuration: a project's configuration, the
// all-projects view's, and one client that reaches any project by the project
// named in each request's context, all over one shared HTTP transport.
//
// Nothing here is kept per project: a project's configuration is a value made
// when asked for, and the routed client (Routed) is one client for every
// project, so a service holding a client for each of 100,000 projects holds
// one.
package client

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Project names one project: its name, which its URL carries, and its
// storage id, which tells it from a later project of the same name.
type Project struct {
	Name string
	// ID is the project's storage id (empty: any project of that name).
	ID string
}

// ProjectConfig is the configuration of project's control plane: base with
// the project's URL prefix on its host.
func ProjectConfig(base *rest.Config, project string) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.ProjectPath(project)
	return cfg
}

// AllProjectsConfig is the configuration of the all-projects view: list and
// watch of a resource in every project at once, each object carrying its
// project (ProjectOf). Any other verb there is refused.
func AllProjectsConfig(base *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.AllProjectsPath
	return cfg
}

// ProjectOf returns the project of an object read from the all-projects view
// (or from a project), from the annotations the server owns on every object
// stored in a project; false for a platform object.
func ProjectOf(obj metav1.Object) (Project, bool) {
	a := obj.GetAnnotations()
	name := a[tenancy.AnnotationKey]
	if name == "" {
		return Project{}, false
	}
	id := a[tenancy.IDAnnotationKey]
	if id == "" {
		id = name // a project stored before storage ids
	}
	return Project{Name: name, ID: id}, true
}

type projectKey struct{}

// WithProject returns a context whose requests through a Routed client go to
// project p's control plane; with p.ID set, the server refuses them (404)
// unless the project of that name still has that storage id, so a request
// made for a deleted project never reaches a later one of the same name.
func WithProject(ctx context.Context, p Project) context.Context {
	return context.WithValue(ctx, projectKey{}, p)
}

// ProjectFrom returns the project WithProject put in ctx.
func ProjectFrom(ctx context.Context) (Project, bool) {
	p, ok := ctx.Value(projectKey{}).(Project)
	return p, ok && p.Name != ""
}

// Routed returns a copy of base whose requests go to the project WithProject
// put in their context, and to the platform where there is none: one client
// built from it serves every project.
func Routed(base *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(base)
	// A host may carry a path of its own (a server behind a proxy): the
	// project's prefix goes after it.
	var hostPath string
	if u, _, err := rest.DefaultServerUrlFor(cfg); err == nil {
		hostPath = strings.TrimSuffix(u.Path, "/")
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return router{rt: rt, hostPath: hostPath} })
	return cfg
}

// router puts the project of a request's context into its URL path.
type router struct {
	rt       http.RoundTripper
	hostPath string
}

func (r router) RoundTrip(req *http.Request) (*http.Response, error) {
	p, ok := ProjectFrom(req.Context())
	if !ok {
		return r.rt.RoundTrip(req)
	}
	if errs := validation.IsDNS1123Label(p.Name); len(errs) > 0 {
		return nil, fmt.Errorf("project %q: %s", p.Name, strings.Join(errs, "; "))
	}
	req = req.Clone(req.Context())
	prefix := r.hostPath + tenancy.ProjectPath(p.Name)
	req.URL.Path = prefix + strings.TrimPrefix(req.URL.Path, r.hostPath)
	if req.URL.RawPath != "" {
		req.URL.RawPath = prefix + strings.TrimPrefix(req.URL.RawPath, r.hostPath)
	}
	if p.ID != "" {
		req.Header.Set(tenancy.ExpectedProjectIDHeader, p.ID)
	}
	return r.rt.RoundTrip(req)
}
