package mcprovider

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// projectCache is one project's view of the provider's shared cache: reads
// return the project's objects only, as the project serves them; informers
// hand its handlers the project's events only (dispatcher).
type projectCache struct {
	p  *Provider
	id string
}

var _ crcache.Cache = projectCache{}

var errProjectView = errors.New("a project's view of the shared cache cannot remove or start informers")

// Get reads one object of the project from the shared cache.
func (c projectCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	inf, gvk, err := c.p.sharedInformer(ctx, obj)
	if err != nil {
		return err
	}
	namespaced, err := c.p.namespaced(gvk)
	if err != nil {
		return err
	}
	ns := key.Namespace
	if !namespaced {
		ns = ""
	}
	item, exists, err := inf.GetIndexer().GetByKey(qualifiedNamespace(c.id, ns) + "/" + key.Name)
	if err != nil {
		return err
	}
	if !exists {
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, key.Name)
	}
	o, ok := item.(runtime.Object)
	if !ok {
		return fmt.Errorf("the cache holds a %T", item)
	}
	out := reflect.ValueOf(unqualified(o))
	if !out.Type().AssignableTo(reflect.TypeOf(obj)) {
		return fmt.Errorf("the cache holds %s, not %T", out.Type(), obj)
	}
	reflect.ValueOf(obj).Elem().Set(out.Elem())
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

// List lists the project's objects from the shared cache: in one namespace,
// or all of the project's; by labels; by a field indexed with IndexField
// (exact match).
func (c projectCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := client.ListOptions{}
	o.ApplyOptions(opts)
	if o.Continue != "" {
		return errors.New("the cache cannot continue a list")
	}
	listGVK, err := apiutil.GVKForObject(list, c.p.scheme)
	if err != nil {
		return err
	}
	gvk := listGVK.GroupVersion().WithKind(strings.TrimSuffix(listGVK.Kind, "List"))
	var example client.Object
	if _, ok := list.(runtime.Unstructured); ok {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		example = u
	} else if _, ok := list.(*metav1.PartialObjectMetadataList); ok {
		pm := &metav1.PartialObjectMetadata{}
		pm.SetGroupVersionKind(gvk)
		example = pm
	} else {
		n, err := c.p.scheme.New(gvk)
		if err != nil {
			return err
		}
		if example, ok = n.(client.Object); !ok {
			return fmt.Errorf("%s is not an object", gvk)
		}
	}
	inf, _, err := c.p.sharedInformer(ctx, example)
	if err != nil {
		return err
	}
	// The project index comes with the informer's dispatcher: a kind the
	// controller reads but never watches has none yet.
	if _, err := c.p.dispatcherOf(inf); err != nil {
		return err
	}
	items, err := c.candidates(inf.GetIndexer(), o)
	if err != nil {
		return err
	}
	objs := make([]runtime.Object, 0, len(items))
	for _, item := range items {
		if o.Limit > 0 && int64(len(objs)) >= o.Limit {
			break
		}
		obj, ok := item.(runtime.Object)
		if !ok {
			continue
		}
		if o.LabelSelector != nil {
			m, err := apimeta.Accessor(obj)
			if err != nil || !o.LabelSelector.Matches(labels.Set(m.GetLabels())) {
				continue
			}
		}
		u := unqualified(obj)
		u.GetObjectKind().SetGroupVersionKind(gvk)
		objs = append(objs, u)
	}
	return apimeta.SetList(list, objs)
}

// candidates are the shared cache's objects a list of the project looks at.
func (c projectCache) candidates(indexer toolscache.Indexer, o client.ListOptions) ([]any, error) {
	if o.FieldSelector == nil || o.FieldSelector.Empty() {
		mine, err := indexer.ByIndex(projectIndex, c.id)
		if err != nil || o.Namespace == "" {
			return mine, err
		}
		// The shared informers keep no index by namespace (see
		// listThenWatch): a project's objects are filtered, so a namespaced
		// list costs what the project holds, never what others do.
		ns := qualifiedNamespace(c.id, o.Namespace)
		inNamespace := mine[:0:0]
		for _, item := range mine {
			if m, ok := item.(metav1.Object); ok && m.GetNamespace() == ns {
				inNamespace = append(inNamespace, item)
			}
		}
		return inNamespace, nil
	}
	reqs := o.FieldSelector.Requirements()
	if len(reqs) != 1 || (reqs[0].Operator != "=" && reqs[0].Operator != "==") {
		return nil, errors.New("the cache lists by one field indexed with IndexField, by exact match")
	}
	// controller-runtime's field indexes key a value by the object's
	// (qualified) namespace and by "__all_namespaces".
	index := "field:" + reqs[0].Field
	if o.Namespace != "" {
		return indexer.ByIndex(index, qualifiedNamespace(c.id, o.Namespace)+"/"+reqs[0].Value)
	}
	all, err := indexer.ByIndex(index, "__all_namespaces/"+reqs[0].Value)
	if err != nil {
		return nil, err
	}
	mine := all[:0:0]
	for _, item := range all {
		if id, ok := idOf(item); ok && id == c.id {
			mine = append(mine, item)
		}
	}
	return mine, nil
}

// GetInformer returns the project's view of the shared informer of obj's kind.
func (c projectCache) GetInformer(ctx context.Context, obj client.Object, _ ...crcache.InformerGetOption) (crcache.Informer, error) {
	inf, _, err := c.p.sharedInformer(ctx, obj)
	if err != nil {
		return nil, err
	}
	d, err := c.p.dispatcherOf(inf)
	if err != nil {
		return nil, err
	}
	return projectInformer{d: d, id: c.id}, nil
}

// GetInformerForKind is GetInformer by kind.
func (c projectCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, _ ...crcache.InformerGetOption) (crcache.Informer, error) {
	obj, err := c.p.scheme.New(gvk)
	if err != nil {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		obj = u
	}
	co, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", gvk)
	}
	return c.GetInformer(ctx, co)
}

// RemoveInformer is refused: the informer serves every project.
func (c projectCache) RemoveInformer(context.Context, client.Object) error { return errProjectView }

// Start does nothing until ctx ends: the provider runs the shared cache.
func (c projectCache) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// WaitForCacheSync waits for the shared cache.
func (c projectCache) WaitForCacheSync(ctx context.Context) bool {
	return c.p.shared.WaitForCacheSync(ctx)
}

// IndexField indexes the shared cache, for every project (Provider.IndexField).
func (c projectCache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	return c.p.IndexField(ctx, obj, field, extract)
}
