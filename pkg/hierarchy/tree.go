package hierarchy

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Tree is the server's one cache of the hierarchy: one shared informer each for
// Organizations, Folders and Projects. Admission, the tenant router and the
// hierarchy controllers all read it (the controllers through Factory), so each
// object is cached once. A miss is confirmed with a live read: an object created
// a moment ago may not be cached yet.
type Tree struct {
	client   dynamic.Interface
	factory  dynamicinformer.DynamicSharedInformerFactory
	orgs     cache.SharedIndexInformer
	folders  cache.SharedIndexInformer
	projects cache.SharedIndexInformer
}

// Init prepares the informers over the server's loopback connection; Run starts
// them. Admission is registered before the server exists, so the Tree is made
// empty and initialized once the loopback configuration is known.
func (t *Tree) Init(loopback *rest.Config) error {
	client, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return err
	}
	t.client = client
	t.factory = dynamicinformer.NewDynamicSharedInformerFactory(client, 10*time.Minute)
	t.orgs = t.factory.ForResource(organizations).Informer()
	t.folders = t.factory.ForResource(folders).Informer()
	t.projects = t.factory.ForResource(projects).Informer()
	return nil
}

func (t *Tree) initialized() bool { return t.client != nil }

// Factory is the informer factory the hierarchy's informers come from.
func (t *Tree) Factory() dynamicinformer.DynamicSharedInformerFactory { return t.factory }

// Run starts the informers and waits for them to sync; call it once the CRDs are established.
func (t *Tree) Run(ctx context.Context) bool {
	t.factory.Start(ctx.Done())
	return cache.WaitForCacheSync(ctx.Done(), t.orgs.HasSynced, t.folders.HasSynced, t.projects.HasSynced)
}

func (t *Tree) get(ctx context.Context, inf cache.SharedIndexInformer, gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	if obj, ok, _ := inf.GetStore().GetByKey(name); ok {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return u, nil
		}
	}
	return t.client.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
}

// ProjectState tells the tenant router whether a project exists and is being deleted.
func (t *Tree) ProjectState(ctx context.Context, name string) (tenancy.ProjectState, error) {
	p, err := t.get(ctx, t.projects, projects, name)
	switch {
	case apierrors.IsNotFound(err):
		return tenancy.ProjectMissing, nil
	case err != nil:
		return tenancy.ProjectMissing, err
	case p.GetDeletionTimestamp() != nil:
		return tenancy.ProjectDeleting, nil
	default:
		return tenancy.ProjectActive, nil
	}
}

// OrganizationExists reports whether the named Organization exists.
func (t *Tree) OrganizationExists(ctx context.Context, name string) (bool, error) {
	_, err := t.get(ctx, t.orgs, organizations, name)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	default:
		return true, nil
	}
}

// OrganizationOf returns the organization label of a Folder or Project, and whether it exists.
func (t *Tree) OrganizationOf(ctx context.Context, gr schema.GroupResource, name string) (string, bool, error) {
	inf, gvr := t.projects, projects
	if gr.Resource == folders.Resource {
		inf, gvr = t.folders, folders
	}
	obj, err := t.get(ctx, inf, gvr, name)
	switch {
	case apierrors.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, err
	default:
		return obj.GetLabels()[tenancy.OrganizationLabel], true, nil
	}
}
