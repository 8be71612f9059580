package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/tenancy"
)

var foldersGVR = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "folders"}

func folder(name, parentKind, parent string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Folder", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"parentRef": map[string]any{"kind": parentKind, "name": parent}},
	}}
}

// wantInvalid checks err is a 422 naming field whose message contains text.
func wantInvalid(t *testing.T, err error, field, text string) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 422 || !hasCause(status.Status(), field) || !strings.Contains(err.Error(), text) {
		t.Fatalf("got %v, want 422 on %s saying %q", err, field, text)
	}
}

func TestHierarchyAdmission(t *testing.T) {
	m := shared
	ctx := context.Background()
	n := projectSeq.Add(1)
	orgA, orgB := fmt.Sprintf("h-a-%d", n), fmt.Sprintf("h-b-%d", n)
	for _, o := range []string{orgA, orgB} {
		if err := m.ensureOrganization(o); err != nil {
			t.Fatal(err)
		}
	}
	folders := m.dynamic(t).Resource(foldersGVR)
	projects := m.dynamic(t).Resource(projectsGVR)
	name := func(s string) string { return fmt.Sprintf("%s-%d", s, n) }

	// A chain of folders carries the organization's label all the way down.
	parentKind, parent := "Organization", orgA
	for i := 1; i <= 8; i++ {
		f, err := folders.Create(ctx, folder(name(fmt.Sprintf("f%d", i)), parentKind, parent), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("folder at depth %d: %v", i, err)
		}
		if f.GetLabels()[orgLabel] != orgA {
			t.Fatalf("folder at depth %d labelled %v", i, f.GetLabels())
		}
		parentKind, parent = "Folder", f.GetName()
	}
	_, err := folders.Create(ctx, folder(name("f9"), "Folder", name("f8")), metav1.CreateOptions{})
	wantInvalid(t, err, "spec.parentRef", "at most 8 deep")

	// A project below a folder, with a forged label: the server's label wins.
	p := project(name("deep-project"), "", map[string]any{orgLabel: orgB})
	unstructured.SetNestedField(p.Object, map[string]any{"kind": "Folder", "name": name("f3")}, "spec", "ownerRef") //nolint:errcheck
	made, err := projects.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if made.GetLabels()[orgLabel] != orgA {
		t.Fatalf("project labelled %v, want %s", made.GetLabels(), orgA)
	}

	// Parents must exist.
	_, err = projects.Create(ctx, project(name("orphan"), "no-such-org", nil), metav1.CreateOptions{})
	wantInvalid(t, err, "spec.ownerRef", `Organization "no-such-org" does not exist`)
	_, err = folders.Create(ctx, folder(name("lost"), "Folder", "no-such-folder"), metav1.CreateOptions{})
	wantInvalid(t, err, "spec.parentRef", `Folder "no-such-folder" does not exist`)

	// Moves within the organization are allowed; cycles and other organizations are not.
	if _, err := folders.Patch(ctx, name("f2"), types.MergePatchType, []byte(`{"spec":{"parentRef":{"kind":"Organization","name":"`+orgA+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("moving f2 to the organization: %v", err)
	}
	_, err = folders.Patch(ctx, name("f2"), types.MergePatchType, []byte(`{"spec":{"parentRef":{"kind":"Folder","name":"`+name("f4")+`"}}}`), metav1.PatchOptions{})
	wantInvalid(t, err, "spec.parentRef", "its own ancestor")
	if _, err := folders.Create(ctx, folder(name("b-root"), "Organization", orgB), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = folders.Patch(ctx, name("f5"), types.MergePatchType, []byte(`{"spec":{"parentRef":{"kind":"Folder","name":"`+name("b-root")+`"}}}`), metav1.PatchOptions{})
	wantInvalid(t, err, "spec.parentRef", "to another organization is not allowed")
	_, err = projects.Patch(ctx, made.GetName(), types.MergePatchType, []byte(`{"spec":{"ownerRef":{"kind":"Organization","name":"`+orgB+`"}}}`), metav1.PatchOptions{})
	wantInvalid(t, err, "spec.ownerRef", "to another organization is not allowed")
	_, err = projects.Patch(ctx, made.GetName(), types.MergePatchType, []byte(`{"metadata":{"labels":{"`+orgLabel+`":"`+orgB+`"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := projects.Get(ctx, made.GetName(), metav1.GetOptions{}); got.GetLabels()[orgLabel] != orgA {
		t.Fatalf("the organization label changed to %v", got.GetLabels())
	}
}

// projectCondition returns the status and message of a Project's condition,
// and whether the Project exists.
func projectCondition(t *testing.T, m *milo, name, condType string) (string, string, bool) {
	t.Helper()
	cond, exists := projectConditionFields(t, m, name, condType)
	status, _ := cond["status"].(string)
	msg, _ := cond["message"].(string)
	return status, msg, exists
}

// projectConditionFields returns a Project's condition (nil when it has
// none of the type), and whether the Project exists.
func projectConditionFields(t *testing.T, m *milo, name, condType string) (map[string]any, bool) {
	t.Helper()
	p, err := m.dynamic(t).Resource(projectsGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, false
	}
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	for _, c := range conds {
		if cm, ok := c.(map[string]any); ok && cm["type"] == condType {
			return cm, true
		}
	}
	return nil, true
}

func TestProjectDeletionEmptiesItAndReleasesTheName(t *testing.T) {
	m := shared
	ctx := context.Background()
	name := m.newProject(t, "doomed")
	c := m.projectKube(t, name)
	createNamespace(t, c, "team")
	createConfigMap(t, c, "team", "plain", nil, nil)
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A second resource, in another namespace: the deletion finds what
	// every resource holds, whichever way it asks.
	heldSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}
	if _, err := c.CoreV1().Secrets("team").Create(ctx, heldSecret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := m.newProject(t, "bystander")
	createConfigMap(t, m.projectKube(t, other), "default", "held", nil, nil)

	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cleanup reports the object it waits for", func() error {
		status, msg, _ := projectCondition(t, m, name, "ResourceCleanup")
		if status != "True" || !strings.Contains(msg, "2 object(s)") || !strings.Contains(msg, "configmaps default/held") || !strings.Contains(msg, "secrets team/held") {
			return fmt.Errorf("ResourceCleanup %s %q", status, msg)
		}
		return nil
	})
	if _, err := c.CoreV1().ConfigMaps("team").Get(ctx, "plain", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("an object without finalizers survived: %v", err)
	}
	_, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("create in a project being deleted: %v", err)
	}

	// Releasing the finalizers lets the deletion finish.
	if _, err := c.CoreV1().ConfigMaps("default").Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets("team").Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	m.waitProjectGone(t, name)
	all, err := m.projectKube(t, "*").CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range all.Items {
		if cm.Annotations[tenantAnnotation] == name {
			t.Fatalf("object %s/%s of the deleted project remains", cm.Namespace, cm.Name)
		}
	}
	if _, err := m.projectKube(t, other).CoreV1().ConfigMaps("default").Get(ctx, "held", metav1.GetOptions{}); err != nil {
		t.Fatalf("the bystander project lost its object: %v", err)
	}

	// The name is free again, and the new project starts empty.
	m.createProject(t, name)
	m.waitProjectReady(t, name)
	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil || namespaceNames(nss.Items) != "default kube-system" {
		t.Fatalf("the re-created project holds namespaces %v %v", nss, err)
	}
	if cms, err := c.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); err != nil || len(ownConfigMaps(cms.Items)) != 0 {
		t.Fatalf("the re-created project holds configmaps %v %v", cms, err)
	}
}

// TestProjectDeletionLeavesWhatNothingHoldsToThePurge: a deleted project
// whose objects have no finalizers is purged without deleting them one by
// one through its API, and watchers see them deleted all the same; while
// something holds the deletion, everything is deleted through the API, and
// a resource whose deletion fails is reported as DeletionFailed. The
// witness is a platform policy that denies deleting one ConfigMap: it
// fails the deletion through the API, and the purge does not ask it.
func TestProjectDeletionLeavesWhatNothingHoldsToThePurge(t *testing.T) {
	m := shared
	ctx := context.Background()
	name := m.newProject(t, "purged")
	c := m.projectKube(t, name)
	createNamespace(t, c, "team")
	keep := map[string]string{"e2e.miloapis.com/keep": name}
	createConfigMap(t, c, "default", "kept", nil, keep)
	createConfigMap(t, c, "team", "plain", nil, nil)
	held := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}
	if _, err := c.CoreV1().Secrets("team").Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.configMapPolicy(t, "keep-"+name, "DELETE",
		fmt.Sprintf("!has(oldObject.metadata.labels) || oldObject.metadata.labels[?'e2e.miloapis.com/keep'].orValue('') != '%s'", name),
		"this configmap is kept")
	eventually(t, "the policy denies deleting a kept ConfigMap", func() error {
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: keep}},
			metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := c.CoreV1().ConfigMaps("default").Delete(ctx, "probe", metav1.DeleteOptions{}); err == nil || !strings.Contains(err.Error(), "this configmap is kept") {
			return fmt.Errorf("deleting a kept ConfigMap: %v", err)
		}
		return nil
	})

	// A watcher of every project's ConfigMaps, as a service keeps one.
	all := m.projectKube(t, "*").CoreV1().ConfigMaps("")
	list, err := all.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := all.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Secret holds the deletion, so everything is deleted through the
	// API, where the policy refuses the kept ConfigMaps.
	eventually(t, "the cleanup reports the refused deletion", func() error {
		cond, _ := projectConditionFields(t, m, name, "ResourceCleanup")
		msg, _ := cond["message"].(string)
		if cond["reason"] != "DeletionFailed" || !strings.Contains(msg, "configmaps") || !strings.Contains(msg, "this configmap is kept") {
			return fmt.Errorf("ResourceCleanup %v", cond)
		}
		return nil
	})
	if _, err := c.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("the kept ConfigMap: %v", err)
	}
	if _, err := c.CoreV1().Secrets("team").Get(ctx, "held", metav1.GetOptions{}); err != nil {
		t.Fatalf("the held Secret: %v", err)
	}

	// Once nothing holds it, what is left goes with the purge, which the
	// policy is not asked about.
	if _, err := c.CoreV1().Secrets("team").Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	m.waitProjectGone(t, name)
	deleted := map[string]bool{}
	for !deleted["default/kept"] || !deleted["default/probe"] || !deleted["team/plain"] {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended; deleted of %s: %v", name, deleted)
			}
			if cm, ok := e.Object.(*corev1.ConfigMap); ok && e.Type == watch.Deleted && cm.Annotations[tenantAnnotation] == name {
				deleted[cm.Namespace+"/"+cm.Name] = true
			}
		case <-time.After(time.Minute):
			t.Fatalf("the watcher saw deleted of %s only: %v", name, deleted)
		}
	}
}

// TestProjectDeletedRightAfterAFinalizerWaitsForIt: the deletion's lists may
// be served by a watch cache that has not seen the last writes yet, and
// updates still work in a project being deleted; the purge is conditional
// on none of the project's keys having been written since the lists, so an
// object that has a finalizer by the time its project would be purged —
// created with one just before the deletion, or given one while it runs —
// holds the project and is never purged. Several projects at once, each
// written while its deletion starts.
func TestProjectDeletedRightAfterAFinalizerWaitsForIt(t *testing.T) {
	m := shared
	ctx := context.Background()
	const n = 16
	type doomed struct {
		name string
		c    kubernetes.Interface
		// created tells whether an object with a finalizer was created
		// just before the deletion; held, whether the finalizer given while
		// it runs was written (it may come after the purge, and find
		// nothing).
		created, held bool
	}
	projects := make([]*doomed, n)
	for i := range projects {
		name := m.newProject(t, "lastwrite")
		projects[i] = &doomed{name: name, c: m.projectKube(t, name), created: i%2 == 0}
		createConfigMap(t, projects[i].c, "default", "later", nil, nil)
	}
	platform := m.dynamic(t).Resource(projectsGVR)
	hold := []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, p := range projects {
		wg.Go(func() {
			cms := p.c.CoreV1().ConfigMaps("default")
			if p.created {
				// Two resources' objects: one cache may be behind and the
				// other not.
				held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}
				if _, err := cms.Create(ctx, held, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				heldSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}
				if _, err := p.c.CoreV1().Secrets("default").Create(ctx, heldSecret, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
			if err := platform.Delete(ctx, p.name, metav1.DeleteOptions{}); err != nil {
				errs <- err
				return
			}
			_, err := cms.Patch(ctx, "later", types.MergePatchType, hold, metav1.PatchOptions{})
			switch {
			case err == nil:
				p.held = true
			case !apierrors.IsNotFound(err):
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, p := range projects {
		var holding []string
		if p.created {
			holding = append(holding, "configmaps default/held", "secrets default/held")
		}
		if p.held {
			holding = append(holding, "configmaps default/later")
		}
		if len(holding) == 0 {
			m.waitProjectGone(t, p.name)
			continue
		}
		gone := false
		eventually(t, p.name+"'s cleanup waits for its finalizers", func() error {
			if _, err := platform.Get(ctx, p.name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				gone = true
				return nil
			}
			status, msg, _ := projectCondition(t, m, p.name, "ResourceCleanup")
			if status != "True" || !strings.Contains(msg, fmt.Sprintf("waiting for %d object(s)", len(holding))) {
				return fmt.Errorf("ResourceCleanup %s %q", status, msg)
			}
			for _, h := range holding {
				if !strings.Contains(msg, h) {
					return fmt.Errorf("ResourceCleanup %s %q", status, msg)
				}
			}
			return nil
		})
		if gone {
			t.Fatalf("project %s was purged though %v had finalizers before it could be", p.name, holding)
		}
		release := []byte(`{"metadata":{"finalizers":null}}`)
		if p.held {
			if _, err := p.c.CoreV1().ConfigMaps("default").Patch(ctx, "later", types.MergePatchType, release, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if p.created {
			if _, err := p.c.CoreV1().ConfigMaps("default").Patch(ctx, "held", types.MergePatchType, release, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.c.CoreV1().Secrets("default").Patch(ctx, "held", types.MergePatchType, release, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		m.waitProjectGone(t, p.name)
	}
}

// waitProjectGone waits until the named Project is deleted and purged.
func (m *milo) waitProjectGone(t *testing.T, name string) {
	t.Helper()
	eventually(t, "project "+name+" gone", func() error {
		if _, _, exists := projectCondition(t, m, name, "Ready"); exists {
			return fmt.Errorf("project %s still exists", name)
		}
		return nil
	})
}

// TestHierarchyKindsBehaveAsTheirDefinitionsSaid: served from typed storage,
// the hierarchy's kinds keep the behaviour they had as custom resources with
// a status subresource: defaults applied and shown, a status sent with the
// object dropped, the generation counting spec changes only, status writes
// changing nothing else, server-side apply, printer columns, field
// selectors on metadata.name only, and JSON for a client that asks for
// protobuf first.
func TestHierarchyKindsBehaveAsTheirDefinitionsSaid(t *testing.T) {
	m := shared
	ctx := context.Background()
	n := projectSeq.Add(1)
	org := fmt.Sprintf("typed-%d", n)
	orgs := m.dynamic(t).Resource(organizationsGVR)
	created, err := orgs.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Organization", "metadata": map[string]any{"name": org},
		"status": map[string]any{"observedGeneration": int64(42)},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if typ, _, _ := unstructured.NestedString(created.Object, "spec", "type"); typ != "Standard" {
		t.Errorf("default type %q, want Standard", typ)
	}
	if g, _, _ := unstructured.NestedInt64(created.Object, "status", "observedGeneration"); g == 42 || created.GetGeneration() != 1 {
		t.Errorf("created with generation %d and the status sent: %v", created.GetGeneration(), created.Object["status"])
	}

	folders := m.dynamic(t).Resource(foldersGVR)
	f, err := folders.Create(ctx, folder(fmt.Sprintf("typed-a-%d", n), "Organization", org), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := folders.Create(ctx, folder(fmt.Sprintf("typed-b-%d", n), "Organization", org), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A label is no spec change; a move is.
	eventuallyUpdate := func(what string, change func(*unstructured.Unstructured)) *unstructured.Unstructured {
		var out *unstructured.Unstructured
		eventually(t, what, func() error {
			cur, err := folders.Get(ctx, f.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(cur)
			out, err = folders.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		return out
	}
	labelled := eventuallyUpdate("label the folder", func(u *unstructured.Unstructured) {
		u.SetLabels(map[string]string{"team": "a", orgLabel: org})
		_ = unstructured.SetNestedField(u.Object, int64(99), "status", "observedGeneration")
	})
	if labelled.GetGeneration() != 1 {
		t.Errorf("a label change made generation %d", labelled.GetGeneration())
	}
	if g, _, _ := unstructured.NestedInt64(labelled.Object, "status", "observedGeneration"); g == 99 {
		t.Error("the main resource wrote status")
	}
	moved := eventuallyUpdate("move the folder", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, fmt.Sprintf("typed-b-%d", n), "spec", "parentRef", "name")
		_ = unstructured.SetNestedField(u.Object, "Folder", "spec", "parentRef", "kind")
	})
	if moved.GetGeneration() != 2 {
		t.Errorf("a move made generation %d, want 2", moved.GetGeneration())
	}

	// A status write keeps spec and metadata, and writes status. (What it
	// answers is what it stored; the hierarchy controller may write the
	// status again right after.)
	var after *unstructured.Unstructured
	eventually(t, "write the folder's status", func() error {
		cur, err := folders.Get(ctx, f.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		_ = unstructured.SetNestedField(cur.Object, "Organization", "spec", "parentRef", "kind")
		cur.SetLabels(map[string]string{"sneaked": "in"})
		_ = unstructured.SetNestedField(cur.Object, int64(7), "status", "observedGeneration")
		after, err = folders.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if kind, _, _ := unstructured.NestedString(after.Object, "spec", "parentRef", "kind"); kind != "Folder" || after.GetLabels()["sneaked"] != "" {
		t.Errorf("a status write changed spec or labels: %v %v", after.Object["spec"], after.GetLabels())
	}
	if g, _, _ := unstructured.NestedInt64(after.Object, "status", "observedGeneration"); g != 7 {
		t.Errorf("the status write stored observedGeneration %d, want 7", g)
	}

	// Server-side apply, as kubectl does it, and the printer columns.
	applied := fmt.Sprintf("typed-c-%d", n)
	m.mustKubectl(t, fmt.Sprintf("apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Folder\nmetadata: {name: %s}\nspec: {parentRef: {kind: Organization, name: %s}}\n", applied, org),
		"apply", "--server-side", "--field-manager=typed-test", "-f", "-")
	got, err := folders.Get(ctx, applied, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managers := map[string]bool{}
	for _, mf := range got.GetManagedFields() {
		managers[mf.Manager] = true
	}
	if !managers["typed-test"] {
		t.Errorf("server-side apply left managers %v", managers)
	}
	out := m.mustKubectl(t, "", "get", "folder", applied)
	if !strings.Contains(out, "PARENT KIND") || !strings.Contains(out, "ORGANIZATION") || !strings.Contains(out, org) {
		t.Errorf("kubectl get folder printed:\n%s", out)
	}

	// Field selectors: metadata.name, and nothing else.
	list, err := folders.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + applied})
	if err != nil || len(list.Items) != 1 {
		t.Errorf("field selector on metadata.name: %v %v", list, err)
	}
	if _, err := folders.List(ctx, metav1.ListOptions{FieldSelector: "spec.parentRef.name=" + org}); !apierrors.IsBadRequest(err) {
		t.Errorf("field selector on spec: %v, want 400", err)
	}

	// A client asking for protobuf first is answered in protobuf, which
	// decodes into the Go type; as is a metadata-only request (the garbage
	// collector's), and a list.
	scheme := runtime.NewScheme()
	if err := resourcemanagerv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pb := protobuf.NewSerializer(scheme, scheme)
	get := func(path string) runtime.Object {
		t.Helper()
		res := m.kube(t).Discovery().RESTClient().Get().AbsPath(path).
			SetHeader("Accept", "application/vnd.kubernetes.protobuf, application/json").Do(ctx)
		var contentType string
		res.ContentType(&contentType)
		body, err := res.Raw()
		if err != nil || contentType != "application/vnd.kubernetes.protobuf" {
			t.Fatalf("%s, protobuf first: %v, answered in %q", path, err, contentType)
		}
		obj, _, err := pb.Decode(body, nil, nil)
		if err != nil {
			t.Fatalf("%s: decoding its protobuf: %v", path, err)
		}
		return obj
	}
	folderPath := "/apis/resourcemanager.miloapis.com/v1alpha1/folders"
	if f, ok := get(folderPath + "/" + applied).(*resourcemanagerv1alpha1.Folder); !ok || f.Name != applied || f.Spec.ParentRef.Name != org || f.Spec.ParentRef.Kind != "Organization" {
		t.Errorf("the folder in protobuf: %#v", f)
	}
	if l, ok := get(folderPath).(*resourcemanagerv1alpha1.FolderList); !ok || len(l.Items) < 3 {
		t.Errorf("the folders in protobuf: %T", l)
	}
	md, err := metadata.NewForConfigOrDie(m.restConfig(t)).Resource(foldersGVR).Get(ctx, applied, metav1.GetOptions{})
	if err != nil || md.Name != applied || md.UID != got.GetUID() {
		t.Errorf("the folder's metadata: %v, %v", md, err)
	}
}

// TestHierarchyInformersHoldGoTypes: the informer factory the server and the
// controller manager share holds Organizations, Folders, Projects and
// OrganizationMemberships as the group's Go types, without managedFields,
// hears their changes and deletions, and its readers read them; every other
// resource stays unstructured.
func TestHierarchyInformersHoldGoTypes(t *testing.T) {
	m := shared
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := projectSeq.Add(1)
	org, fold, proj := fmt.Sprintf("typed-%d", n), fmt.Sprintf("typed-f-%d", n), fmt.Sprintf("typed-p-%d", n)
	if err := m.ensureOrganization(org); err != nil {
		t.Fatal(err)
	}
	factory, err := hierarchy.NewInformerFactory(m.restConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	projects := factory.ForResource(projectsGVR).Informer()
	if factory.ForResource(projectsGVR).Informer() != projects {
		t.Fatal("a second ForResource of projects made another informer")
	}
	folders := factory.ForResource(foldersGVR).Informer()
	orgs := factory.ForResource(projectsGVR.GroupVersion().WithResource("organizations")).Informer()
	memberships := factory.ForResource(hierarchy.Memberships).Informer()
	roles := factory.ForResource(schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "roles"}).Informer()
	deleted := make(chan struct{}, 1)
	if _, err := projects.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		// Other tests' projects go too, on the shared server.
		if p := hierarchy.Object(obj); p != nil && p.GetName() == proj {
			select {
			case deleted <- struct{}{}:
			default:
			}
		}
	}}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }() // Shutdown waits for the informers to stop
	for gvr, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%s did not sync", gvr.Resource)
		}
	}

	if _, err := m.dynamic(t).Resource(foldersGVR).Create(ctx, folder(fold, "Organization", org), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.dynamic(t).Resource(projectsGVR).Create(ctx, objectOf("Project", proj, map[string]any{
		"ownerRef": map[string]any{"kind": "Folder", "name": fold}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var p *resourcemanagerv1alpha1.Project
	eventually(t, "the informer holds project "+proj+" Ready", func() error {
		obj, ok, _ := projects.GetStore().GetByKey(proj)
		if !ok {
			return fmt.Errorf("not cached")
		}
		typed, isTyped := obj.(*resourcemanagerv1alpha1.Project)
		if !isTyped {
			t.Fatalf("the informer holds a %T", obj)
		}
		if !hierarchy.IsReady(typed) {
			return fmt.Errorf("not Ready: %+v", typed.Status.Conditions)
		}
		p = typed
		return nil
	})
	if p.ManagedFields != nil {
		t.Errorf("the cached project keeps its managedFields")
	}
	if kind, name := hierarchy.ParentOf(p); kind != "Folder" || name != fold {
		t.Errorf("ParentOf = %s %s, want Folder %s", kind, name, fold)
	}
	if p.Labels[orgLabel] != org || tenancy.StorageIDOf(p) != tenancy.ProjectID(string(p.UID)) {
		t.Errorf("labels %v, storage id %s: want the organization's label and the id of its uid", p.Labels, tenancy.StorageIDOf(p))
	}
	u, err := hierarchy.AsUnstructured(p)
	if err != nil || u.GetKind() != "Project" || u.GetAPIVersion() != "resourcemanager.miloapis.com/v1alpha1" || u.GetName() != proj {
		t.Fatalf("AsUnstructured = %v %v", u, err)
	}
	if kind, name := hierarchy.ParentOf(u); kind != "Folder" || name != fold || !hierarchy.IsReady(u) {
		t.Errorf("the unstructured copy reads %s %s, Ready %v", kind, name, hierarchy.IsReady(u))
	}
	for _, x := range []struct {
		inf  cache.SharedIndexInformer
		key  string
		want string
	}{{folders, fold, "*v1alpha1.Folder"}, {orgs, org, "*v1alpha1.Organization"}} {
		eventually(t, x.key+" cached", func() error {
			obj, ok, _ := x.inf.GetStore().GetByKey(x.key)
			if !ok {
				return fmt.Errorf("not cached")
			}
			if got := fmt.Sprintf("%T", obj); got != x.want {
				t.Fatalf("%s is cached as %s, want %s", x.key, got, x.want)
			}
			return nil
		})
	}
	eventually(t, "the organization's creator membership cached", func() error {
		objs, _ := memberships.GetIndexer().ByIndex(cache.NamespaceIndex, tenancy.OrganizationNamespace(org))
		if len(objs) == 0 {
			return fmt.Errorf("none")
		}
		if _, ok := objs[0].(*resourcemanagerv1alpha1.OrganizationMembership); !ok {
			t.Fatalf("a membership is cached as %T", objs[0])
		}
		return nil
	})
	for _, obj := range roles.GetStore().List() {
		if _, ok := obj.(*unstructured.Unstructured); !ok {
			t.Fatalf("a Role is cached as %T", obj)
		}
	}

	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, proj, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-deleted:
	case <-time.After(time.Minute):
		t.Fatal("the project's deletion never reached the informer")
	}
}
