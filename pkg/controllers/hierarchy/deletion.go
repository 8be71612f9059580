package hierarchy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenancy"
)

// deleteOrganization deletes the organization's folders and projects, then its
// namespace (emptied first, as no namespace controller runs for the platform),
// then releases the Organization.
func (c *Controllers) deleteOrganization(ctx context.Context, org *unstructured.Unstructured) error {
	if !slices.Contains(org.GetFinalizers(), hierarchy.OrganizationFinalizer) {
		return nil
	}
	waiting, err := c.deleteChildren(ctx, hierarchy.ByOrganization, org.GetName())
	if err != nil {
		return err
	}
	if waiting == "" {
		waiting, err = c.deleteOrganizationNamespace(ctx, tenancy.OrganizationNamespace(org.GetName()))
		if err != nil {
			return err
		}
	}
	if waiting != "" {
		if err := c.setCondition(ctx, organizations, org, cleanupCondition("DeletingContents", waiting)); err != nil {
			return err
		}
		c.event(org, corev1.EventTypeNormal, "DeletingContents", "%s", waiting)
		return errWaiting{waiting}
	}
	if c.OrganizationGone != nil {
		// Its Projects are all gone: so are their counts.
		if err := c.OrganizationGone(ctx, org.GetName()); err != nil {
			return err
		}
	}
	return c.released(ctx, organizations, org, hierarchy.OrganizationFinalizer)
}

// deleteFolder deletes the folder's child folders and projects, then releases it.
func (c *Controllers) deleteFolder(ctx context.Context, f *unstructured.Unstructured) error {
	if !slices.Contains(f.GetFinalizers(), hierarchy.FolderFinalizer) {
		return nil
	}
	waiting, err := c.deleteChildren(ctx, hierarchy.ByParent, hierarchy.ParentKey("Folder", f.GetName()))
	if err != nil {
		return err
	}
	if waiting != "" {
		if err := c.setCondition(ctx, folders, f, cleanupCondition("DeletingContents", waiting)); err != nil {
			return err
		}
		c.event(f, corev1.EventTypeNormal, "DeletingContents", "%s", waiting)
		return errWaiting{waiting}
	}
	return c.released(ctx, folders, f, hierarchy.FolderFinalizer)
}

// deleteChildren deletes the Folders and Projects found under key in the given
// index, and describes those still present ("" when none is).
func (c *Controllers) deleteChildren(ctx context.Context, index, key string) (string, error) {
	var counts []string
	for _, kind := range []struct {
		gvr      schema.GroupVersionResource
		informer cache.SharedIndexInformer
	}{{folders, c.folders}, {projects, c.projects}} {
		children, err := kind.informer.GetIndexer().ByIndex(index, key)
		if err != nil {
			return "", err
		}
		for _, obj := range children {
			child := hierarchy.Object(obj)
			if child == nil || child.GetDeletionTimestamp() != nil {
				continue
			}
			err := c.dynamic.Resource(kind.gvr).Delete(ctx, child.GetName(), metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: ptr.To(child.GetUID())}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return "", fmt.Errorf("deleting %s %s: %w", kind.gvr.Resource, child.GetName(), err)
			}
		}
		if len(children) > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", len(children), kind.gvr.Resource))
		}
	}
	if len(counts) == 0 {
		return "", nil
	}
	return "waiting for " + strings.Join(counts, " and ") + " to be deleted", nil
}

// deleteOrganizationNamespace deletes the namespace and everything in it, and
// describes what is still there ("" once the namespace is gone).
func (c *Controllers) deleteOrganizationNamespace(ctx context.Context, name string) (string, error) {
	namespaces := c.platform.CoreV1().Namespaces()
	ns, err := namespaces.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if ns.DeletionTimestamp == nil {
		if err := namespaces.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return "", err
		}
	}
	remaining, _, err := c.deleteContents(ctx, c.config, &c.platformResources, name, false, false, false, nil)
	if err != nil {
		return "", err
	}
	if len(remaining) > 0 {
		return describeRemaining(remaining), nil
	}
	if len(ns.Spec.Finalizers) > 0 {
		ns.Spec.Finalizers = nil
		if _, err := namespaces.Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return "", fmt.Errorf("finalizing namespace %s: %w", name, err)
		}
	}
	if _, err := namespaces.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return "waiting for namespace " + name + " to be deleted", err
	}
	return "", nil
}

// deleteProject empties a project being deleted, through its API so that
// finalizers and watchers see every deletion, then releases the Project to the
// server's Purger. Objects held by finalizers are reported in the
// ResourceCleanup condition and waited for.
func (c *Controllers) deleteProject(ctx context.Context, p *unstructured.Unstructured) error {
	if !slices.Contains(p.GetFinalizers(), hierarchy.ProjectFinalizer) {
		return nil
	}
	// Objects are left to the purge only where these controllers purge
	// (inside the server, which can make the purge conditional) and the
	// Project has the purge finalizer: one deleted before it existed is
	// emptied through the API.
	purge := c.Purge != nil && slices.Contains(p.GetFinalizers(), hierarchy.PurgeFinalizer)
	// Such a project is first read from the watch caches as they are: a
	// consistent list waits for its cache to catch up with etcd, a third of
	// a deletion's time when projects are deleted by the thousand. Only the
	// purge, conditional on none of the project's keys written after the
	// lists, acts on what they say; a pass that would act otherwise, or
	// whose purge finds keys written since (which a cache behind etcd, or
	// one its resource's writes have not moved for a while, makes likely),
	// is made again at once on consistent lists.
	passes := []bool{false}
	if purge {
		passes = []bool{true, false}
	}
	for _, fromCache := range passes {
		err := c.emptyProject(ctx, p, purge, fromCache)
		if fromCache && (errors.Is(err, errReadAgain) || errors.Is(err, tenantstorage.ErrChanged)) {
			continue
		}
		if errors.Is(err, tenantstorage.ErrChanged) {
			return errWaiting{"the project's objects changed while it was being deleted; reading them again"}
		}
		return err
	}
	return nil
}

// emptyProject makes one pass of a project's deletion: it deletes what the
// project holds, or leaves it to the purge, and purges and releases the
// project once nothing holds it. With fromCache its lists are the watch
// caches' as they are, and it answers errReadAgain rather than act on them
// other than by the conditional purge.
func (c *Controllers) emptyProject(ctx context.Context, p *unstructured.Unstructured, purge, fromCache bool) error {
	remaining, since, err := c.deleteContents(ctx, c.projectConfig(p.GetName()), &c.projectResources, metav1.NamespaceAll, true, purge, fromCache, c.storedCounts(ctx, p))
	if errors.Is(err, errReadAgain) {
		return err
	}
	if err != nil {
		// Said in the condition: a resource that cannot be deleted holds
		// the project as a finalizer does.
		if cerr := c.setCondition(ctx, projects, p, cleanupCondition("DeletionFailed", failedMessage(err))); cerr != nil {
			return cerr
		}
		return err
	}
	if len(remaining) > 0 {
		msg := describeRemaining(remaining)
		if err := c.setCondition(ctx, projects, p, cleanupCondition("WaitingForFinalizers", msg)); err != nil {
			return err
		}
		c.event(p, corev1.EventTypeWarning, "WaitingForFinalizers", "%s", msg)
		return errWaiting{msg}
	}
	// No "purging" condition is written: it would cost every deletion a write
	// for a state that lasts a moment.
	if purge {
		return c.purged(ctx, p, since)
	}
	return c.released(ctx, projects, p, hierarchy.ProjectFinalizer)
}

// errReadAgain is a deletion pass on the watch caches' lists that would act
// on them other than by the conditional purge.
var errReadAgain = errors.New("the project's objects are to be read again, consistently")

// purged purges the storage of an emptied project and releases it from
// both its finalizers in one write, so that it is gone. The server's Purger,
// which would otherwise purge after released, acts only on a Project
// without the cleanup finalizer: it never sees this one. A purge is
// idempotent, so a failed write is retried from the start. With since (not
// 0), the purge requires the project's keys unchanged after that revision,
// when its objects, left to the purge, were found without finalizers; one
// that finds a change (a finalizer added meanwhile) answers
// tenantstorage.ErrChanged, and the project's objects are read again.
func (c *Controllers) purged(ctx context.Context, p *unstructured.Unstructured, since int64) error {
	start := time.Now()
	if err := c.Purge(ctx, tenancy.StorageIDOf(p), since); err != nil {
		return err
	}
	took := time.Since(start)
	removed, err := removedFinalizer(ctx, c.dynamic, projects, p, hierarchy.ProjectFinalizer, hierarchy.PurgeFinalizer)
	if !removed {
		return err
	}
	purgeDuration.Observe(took.Seconds())
	observeDeletion(p, stageEmptied)
	observeDeletion(p, stagePurged)
	c.event(p, corev1.EventTypeNormal, "Purged", purgedMessage, p.GetName())
	return nil
}

// purgedMessage is the message of the Event that says a Project is gone.
const purgedMessage = "Project %s is deleted: its storage is purged and its name is free"

// maxConditionMessage bounds a condition message made of errors, far below
// the 32 KiB a condition's message may hold: several resources failing with
// long errors must not make the status write fail too.
const maxConditionMessage = 1024

// failedMessage is the ResourceCleanup message of a deletion that failed.
func failedMessage(err error) string {
	msg := "deleting the project's objects failed: " + err.Error()
	if r := []rune(msg); len(r) > maxConditionMessage {
		msg = string(r[:maxConditionMessage]) + "…"
	}
	return msg
}

// released removes the cleanup finalizer of an object whose contents are
// deleted, records how long that took and says so in an Event.
func (c *Controllers) released(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, finalizer string) error {
	removed, err := removedFinalizer(ctx, c.dynamic, gvr, obj, finalizer)
	if !removed {
		return err
	}
	observeDeletion(obj, stageEmptied)
	// An Organization's namespace, where its Events go, is gone by now.
	if obj.GetKind() != "Organization" {
		c.event(obj, corev1.EventTypeNormal, "ContentsDeleted", "everything in %s %s is deleted", obj.GetKind(), obj.GetName())
	}
	return nil
}

func cleanupCondition(reason, message string) metav1.Condition {
	return metav1.Condition{Type: "ResourceCleanup", Status: metav1.ConditionTrue, Reason: reason, Message: message}
}

func describeRemaining(remaining []string) string {
	sort.Strings(remaining)
	shown := remaining
	if len(shown) > 5 {
		shown = shown[:5]
	}
	return fmt.Sprintf("waiting for %d object(s) with finalizers: %s", len(remaining), strings.Join(shown, ", "))
}

// storedCounts counts, when the controllers can count in storage (inside the
// API server), the objects project p stores of each of resources; nil
// otherwise, or when counting fails: then every resource is listed. A
// resource missing from the answer is one storage cannot count (a project's
// own kind whose storage is not built, a resource kept in another etcd):
// it is listed too.
func (c *Controllers) storedCounts(ctx context.Context, p *unstructured.Unstructured) func([]schema.GroupResource) (map[schema.GroupResource]int64, int64) {
	if c.StoredByResource == nil {
		return nil
	}
	return func(resources []schema.GroupResource) (map[schema.GroupResource]int64, int64) {
		counts, revision, err := c.StoredByResource(ctx, tenancy.StorageIDOf(p), resources)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Listing every resource of a deleted project: counting its objects failed", "project", p.GetName(), "err", err)
			return nil, 0
		}
		return counts, revision
	}
}

// deleteContents deletes every object of every deletable resource, except
// namespaces, of the control plane cfg reaches — only in namespace when it is
// given, and only namespaced resources then — and, with ownKinds, of the
// kinds a project defines itself, which the discovery every project shares
// does not name. It returns the objects still present afterwards, as
// "resource namespace/name", and what failed.
//
// One metadata list per resource, at resourceVersion 0, finds what is there;
// most resources of a project are empty and cost nothing more. Only where
// objects exist is a deletecollection sent, per namespace, and the rest listed
// again. Where count is given (the controllers run inside the API server),
// storage is asked first, in one pass over the resources, which of them hold
// any of the project's objects: the others are not listed at all, and those
// that do are listed consistently (a watch cache behind storage would miss
// an object created a moment ago). A deletion then costs requests for the
// resources that hold objects only.
//
// With purge (a project's, whose storage the caller purges once it is
// empty), when storage counted everything the lists found and none of it
// has finalizers, and nothing else holds the project, nothing is deleted
// through the API at all: the purge removes the objects, which watchers see
// as deletions all the same, instead of each costing a write. It then
// returns the earliest revision of what it read — the count's, or its
// earliest list's: the purge must find none of the project's keys written
// after it (a finalizer added meanwhile, an object a create in flight
// stored in a resource counted empty), or look again. Otherwise everything is deleted through the API as in a
// namespace of Kubernetes, so that while the deletion waits only what
// holds it is left, and the revision returned is 0. The project's own
// kinds are always deleted through the API: the purge finds their keys
// through their CRDs, which go only once their instances are gone.
//
// A resource that fails is reported and the others are still deleted: one
// broken kind (a project's conversion webhook that does not answer) holds
// the deletion without hiding everything else's.
func (c *Controllers) deleteContents(ctx context.Context, cfg *rest.Config, resources *allprojects.ResourceLists, namespace string, ownKinds, purge, fromCache bool, count func([]schema.GroupResource) (map[schema.GroupResource]int64, int64)) ([]string, int64, error) {
	dyn, err := dynamic.NewForConfigAndClient(cfg, c.http)
	if err != nil {
		return nil, 0, err
	}
	meta, err := metadata.NewForConfigAndClient(cfg, c.http)
	if err != nil {
		return nil, 0, err
	}
	// A partial answer (a group failing discovery) is used: what it lists is deleted.
	lists, err := resources.Get(func() (discovery.DiscoveryInterface, error) {
		return discovery.NewDiscoveryClientForConfigAndClient(cfg, c.http)
	})
	if len(lists) == 0 && err != nil {
		return nil, 0, fmt.Errorf("discovering the resources to delete: %w", err)
	}
	var served []schema.GroupVersionResource
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || r.Name == "namespaces" || !slices.Contains(r.Verbs, "deletecollection") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			if !r.Namespaced && namespace != "" {
				continue
			}
			served = append(served, gv.WithResource(r.Name))
		}
	}
	var stored map[schema.GroupResource]int64
	var countedAt int64
	if count != nil {
		grs := make([]schema.GroupResource, 0, len(served)+1)
		for _, gvr := range served {
			grs = append(grs, gvr.GroupResource())
		}
		if ownKinds {
			grs = append(grs, customResourceDefinitions.GroupResource())
		}
		stored, countedAt = count(grs)
	}
	// found tells whether a resource may hold objects, and whether storage
	// said so.
	found := func(r schema.GroupResource) (maybe, counted bool) {
		n, known := stored[r]
		return !known || n > 0, known
	}

	var remaining []string
	var failed []error
	// read is the earliest revision of what was read: from it on, what the
	// count and the lists found is known (0: nothing read, or a list that
	// said no revision). A resource counted empty is not listed: an object
	// stored there after the count (a create in flight when the deletion
	// began) is written after read.
	var read int64
	readKnown := true
	if stored != nil {
		read = countedAt
		readKnown = countedAt > 0
	}
	// list finds what one resource holds; del deletes it. It reads
	// consistently (the watch cache may not have seen an object written a
	// moment ago, and what is deleted through the API, or left out of a
	// purge that is not conditional, is decided on what it reads), unless
	// cached says the watch cache as it is will do.
	list := func(gvr schema.GroupVersionResource, cached bool) ([]metav1.PartialObjectMetadata, bool) {
		maybe, counted := found(gvr.GroupResource())
		if !maybe {
			return nil, counted
		}
		items, rv, err := listResource(ctx, meta, gvr, namespace, !cached)
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", gvr.GroupResource(), err))
		}
		if r, perr := strconv.ParseInt(rv, 10, 64); perr == nil && r > 0 {
			if read == 0 || r < read {
				read = r
			}
		} else if err == nil {
			readKnown = false
		}
		return items, counted
	}
	del := func(gvr schema.GroupVersionResource, items []metav1.PartialObjectMetadata) {
		left, err := deleteListed(ctx, dyn, meta, gvr, namespace, items)
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", gvr.GroupResource(), err))
		}
		remaining = append(remaining, left...)
	}

	// The project's own kinds go first, and while any of their instances is
	// left (held by a finalizer) or could not be deleted, their definitions
	// stay, so that the instances stay listable and their finalizers are
	// waited for.
	handled := map[schema.GroupResource]bool{}
	holdDefinitions := false
	if maybe, _ := found(customResourceDefinitions.GroupResource()); ownKinds && maybe {
		own, err := definedKinds(ctx, dyn)
		if err != nil {
			failed = append(failed, err)
			holdDefinitions = true
		}
		for _, gvr := range own {
			handled[gvr.GroupResource()] = true
			before := len(remaining) + len(failed)
			if items, _ := list(gvr, false); len(items) > 0 {
				del(gvr, items)
			}
			if len(remaining)+len(failed) > before {
				holdDefinitions = true
			}
		}
	}
	if holdDefinitions {
		handled[customResourceDefinitions.GroupResource()] = true
	}
	type listing struct {
		gvr     schema.GroupVersionResource
		items   []metav1.PartialObjectMetadata
		counted bool
	}
	var present []listing
	held := false
	for _, gvr := range served {
		if handled[gvr.GroupResource()] {
			continue
		}
		if items, counted := list(gvr, fromCache); len(items) > 0 {
			present = append(present, listing{gvr, items, counted})
			held = held || !counted || slices.ContainsFunc(items, func(o metav1.PartialObjectMetadata) bool { return len(o.Finalizers) > 0 })
		}
	}
	// Left to the purge: what storage counted (so what the purge removes),
	// when nothing the project holds has finalizers, storage counted all of
	// it, and nothing else holds the project. Otherwise everything is deleted
	// through the API, so that while the deletion waits only what holds it
	// is left, as in a namespace of Kubernetes.
	if purge && !held && readKnown && read > 0 && len(remaining) == 0 && len(failed) == 0 {
		return nil, read, nil
	}
	if fromCache {
		// Lists behind etcd decide nothing but a conditional purge.
		return nil, 0, errReadAgain
	}
	for _, f := range present {
		del(f.gvr, f.items)
	}
	return remaining, 0, errors.Join(failed...)
}

// listResource lists the objects of one resource (in namespace, when given);
// consistent makes it read storage rather than the watch cache.
// It returns the list's resource version too.
func listResource(ctx context.Context, meta metadata.Interface, gvr schema.GroupVersionResource, namespace string, consistent bool) ([]metav1.PartialObjectMetadata, string, error) {
	rv := "0"
	if consistent {
		rv = ""
	}
	present, err := meta.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{ResourceVersion: rv})
	if apierrors.IsNotFound(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	return present.Items, present.ResourceVersion, nil
}

// deleteListed deletes every object of one resource in the namespaces of
// listed, its objects as a list found them, and returns those still present
// afterwards (held by finalizers).
func deleteListed(ctx context.Context, dyn dynamic.Interface, meta metadata.Interface, gvr schema.GroupVersionResource, namespace string, listed []metav1.PartialObjectMetadata) ([]string, error) {
	scopes := map[string]bool{}
	for _, o := range listed {
		scopes[o.Namespace] = true
	}
	for ns := range scopes {
		err := dyn.Resource(gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	left, err := meta.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	var remaining []string
	if left != nil {
		for _, o := range left.Items {
			remaining = append(remaining, gvr.Resource+" "+objectName(&o))
		}
	}
	return remaining, nil
}

var customResourceDefinitions = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// definedKinds returns the resources of the kinds a project defines itself
// (its own CRDs, read through the project's API), in a version each serves.
// Only CRDs whose names are accepted and which are established count: one
// refused its names (a group the platform serves, a name taken) has no
// instances, and its spec may name a resource that is not its own. A
// server that serves projects no CRDs answers 404, which means none.
func definedKinds(ctx context.Context, dyn dynamic.Interface) ([]schema.GroupVersionResource, error) {
	crds, err := dyn.Resource(customResourceDefinitions).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the project's CRDs: %w", err)
	}
	var out []schema.GroupVersionResource
	for _, crd := range crds.Items {
		if !conditionTrue(&crd, "NamesAccepted") || !conditionTrue(&crd, "Established") {
			continue
		}
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "status", "acceptedNames", "plural")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		version := ""
		for _, v := range versions {
			m, _ := v.(map[string]any)
			name, _ := m["name"].(string)
			if served, _ := m["served"].(bool); !served || name == "" {
				continue
			}
			if storage, _ := m["storage"].(bool); storage || version == "" {
				version = name
			}
		}
		if group != "" && plural != "" && version != "" {
			out = append(out, schema.GroupVersionResource{Group: group, Version: version, Resource: plural})
		}
	}
	return out, nil
}

// conditionTrue reports whether obj's status has condition typ with status True.
func conditionTrue(obj *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m["status"] == string(metav1.ConditionTrue)
		}
	}
	return false
}

func objectName(o metav1.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// setCondition sets one condition, writing only when it changes.
func (c *Controllers) setCondition(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, cond metav1.Condition) error {
	_, err := c.setConditionWrote(ctx, gvr, obj, cond)
	return err
}

// setConditionWrote is setCondition, reporting whether this call wrote the
// condition (a conflicting write leaves it to the next sync).
func (c *Controllers) setConditionWrote(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, cond metav1.Condition) (bool, error) {
	conditions := conditionsOf(obj)
	cond.ObservedGeneration = obj.GetGeneration()
	if !meta.SetStatusCondition(&conditions, cond) {
		return false, nil
	}
	return c.writeConditionsWrote(ctx, gvr, obj, conditions)
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
	_, err := c.writeConditionsWrote(ctx, gvr, obj, conditions)
	return err
}

func (c *Controllers) writeConditionsWrote(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, conditions []metav1.Condition) (bool, error) {
	raw := make([]any, 0, len(conditions))
	for i := range conditions {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conditions[i])
		if err != nil {
			return false, err
		}
		raw = append(raw, u)
	}
	updated := obj.DeepCopy()
	if err := unstructured.SetNestedSlice(updated.Object, raw, "status", "conditions"); err != nil {
		return false, err
	}
	unstructured.SetNestedField(updated.Object, obj.GetGeneration(), "status", "observedGeneration") //nolint:errcheck
	_, err := c.dynamic.Resource(gvr).Namespace(obj.GetNamespace()).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsConflict(err) {
		return false, nil // the newer version is queued and will be synced
	}
	return err == nil, err
}
