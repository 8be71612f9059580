package hierarchy

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// ProjectFinalizer keeps a Project until everything in it is deleted and its keys purged.
const ProjectFinalizer = "resourcemanager.miloapis.com/project-cleanup"

// Purger removes every remaining key of a project from storage.
type Purger func(ctx context.Context, project string) error

// errWaiting asks for the project to be synced again later.
type errWaiting struct{ msg string }

func (e errWaiting) Error() string { return e.msg }

// deleteProject empties a project being deleted, through its API so that
// finalizers and watchers see every deletion, then purges its keys and releases
// the Project. Objects held by finalizers are reported in the ResourceCleanup
// condition and waited for.
func (c *Controllers) deleteProject(ctx context.Context, p *unstructured.Unstructured) error {
	if !slices.Contains(p.GetFinalizers(), ProjectFinalizer) {
		return nil
	}
	remaining, err := c.deleteContents(ctx, p.GetName())
	if err != nil {
		return err
	}
	if len(remaining) > 0 {
		sort.Strings(remaining)
		shown := remaining
		if len(shown) > 5 {
			shown = shown[:5]
		}
		msg := fmt.Sprintf("waiting for %d object(s) with finalizers: %s", len(remaining), strings.Join(shown, ", "))
		if err := c.setCondition(ctx, projects, p, metav1.Condition{Type: "ResourceCleanup", Status: metav1.ConditionTrue, Reason: "WaitingForFinalizers", Message: msg}); err != nil {
			return err
		}
		return errWaiting{msg}
	}
	if err := c.setCondition(ctx, projects, p, metav1.Condition{Type: "ResourceCleanup", Status: metav1.ConditionTrue, Reason: "Purging", Message: "every object is deleted; purging storage"}); err != nil {
		return err
	}
	if c.purge == nil {
		return fmt.Errorf("no purger: project %s cannot be purged by this controller", p.GetName())
	}
	if err := c.purge(ctx, p.GetName()); err != nil {
		return err
	}
	latest, err := c.dynamic.Resource(projects).Get(ctx, p.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	latest.SetFinalizers(slices.DeleteFunc(latest.GetFinalizers(), func(f string) bool { return f == ProjectFinalizer }))
	_, err = c.dynamic.Resource(projects).Update(ctx, latest, metav1.UpdateOptions{FieldManager: "milo-hierarchy"})
	return err
}

// deleteContents deletes every object of every deletable resource in a project
// except namespaces (which the purge removes with everything else) and returns
// the objects still present afterwards, as "resource namespace/name".
func (c *Controllers) deleteContents(ctx context.Context, project string) ([]string, error) {
	cfg := rest.CopyConfig(c.config)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.ProjectPath(project)
	disco, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, c.http)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, c.http)
	if err != nil {
		return nil, err
	}
	lists, err := c.projectResources(disco)
	if err != nil {
		return nil, fmt.Errorf("discovering the resources of project %s: %w", project, err)
	}
	nsList, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var remaining []string
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || r.Name == "namespaces" || !slices.Contains(r.Verbs, "deletecollection") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			res := dyn.Resource(gv.WithResource(r.Name))
			scopes := []dynamic.ResourceInterface{res}
			if r.Namespaced {
				scopes = scopes[:0]
				for _, ns := range nsList.Items {
					scopes = append(scopes, res.Namespace(ns.GetName()))
				}
			}
			for _, scope := range scopes {
				// Most resources of a project are empty: a list from the watch cache
				// says so without a write.
				present, err := scope.List(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 1})
				if err != nil && !apierrors.IsNotFound(err) {
					return nil, err
				}
				if present == nil || len(present.Items) == 0 {
					continue
				}
				if err := scope.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("deleting %s in project %s: %w", r.Name, project, err)
				}
				left, err := scope.List(ctx, metav1.ListOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					return nil, err
				}
				if left != nil {
					for _, o := range left.Items {
						remaining = append(remaining, r.Name+" "+objectName(&o))
					}
				}
			}
		}
	}
	return remaining, nil
}

func objectName(o metav1.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// setCondition sets one condition, writing only when it changes.
func (c *Controllers) setCondition(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, cond metav1.Condition) error {
	conditions := conditionsOf(obj)
	cond.ObservedGeneration = obj.GetGeneration()
	if !meta.SetStatusCondition(&conditions, cond) {
		return nil
	}
	return c.writeConditions(ctx, gvr, obj, conditions)
}

func conditionsOf(obj *unstructured.Unstructured) []metav1.Condition {
	var conditions []metav1.Condition
	existing, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, e := range existing {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		var cond metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond); err == nil {
			conditions = append(conditions, cond)
		}
	}
	return conditions
}

func (c *Controllers) writeConditions(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, conditions []metav1.Condition) error {
	raw := make([]any, 0, len(conditions))
	for i := range conditions {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conditions[i])
		if err != nil {
			return err
		}
		raw = append(raw, u)
	}
	updated := obj.DeepCopy()
	if err := unstructured.SetNestedSlice(updated.Object, raw, "status", "conditions"); err != nil {
		return err
	}
	unstructured.SetNestedField(updated.Object, obj.GetGeneration(), "status", "observedGeneration") //nolint:errcheck
	_, err := c.dynamic.Resource(gvr).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "milo-hierarchy"})
	if apierrors.IsConflict(err) {
		return nil // the newer version is queued and will be synced
	}
	return err
}

// projectResources returns what a project serves. Every project serves the same
// resources, so one discovery answer is shared by all deletions for a few seconds.
func (c *Controllers) projectResources(disco discovery.DiscoveryInterface) ([]*metav1.APIResourceList, error) {
	c.discoveryMu.Lock()
	defer c.discoveryMu.Unlock()
	if c.discovered != nil && time.Since(c.discoveredAt) < 10*time.Second {
		return c.discovered, nil
	}
	lists, err := disco.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return nil, err
	}
	// A partial answer (a group failing discovery) is used but not kept.
	if err == nil {
		c.discovered, c.discoveredAt = lists, time.Now()
	}
	return lists, nil
}
