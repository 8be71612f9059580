package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

const tenantAnnotation = "tenancy.miloapis.com/project"

var projectsGVR = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "projects"}

var projectSeq atomic.Int64

// newProject creates a Project with a unique name in the platform, waits until it
// is Ready (its control plane bootstrapped) and returns the name.
func (m *milo) newProject(t *testing.T, base string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", base, projectSeq.Add(1))
	m.createProject(t, name)
	m.waitProjectReady(t, name)
	return name
}

func (m *milo) waitProjectReady(t *testing.T, name string) {
	t.Helper()
	eventually(t, "project "+name+" Ready", func() error {
		p, err := m.dynamic(t).Resource(projectsGVR).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", conds)
	})
}

func (m *milo) createProject(t testing.TB, name string) {
	t.Helper()
	if err := m.tryCreateProject(t, name); err != nil {
		t.Fatal(err)
	}
}

// tryCreateProject creates a Project and reports failure as an error, for use off the test goroutine.
func (m *milo) tryCreateProject(t testing.TB, name string) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resourcemanager.miloapis.com/v1alpha1",
		"kind":       "Project",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": "acme"}},
	}}
	if _, err := dynamicFor(t, m.restConfig(t)).Resource(projectsGVR).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating project %s: %w", name, err)
	}
	return nil
}

func createNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

func createConfigMap(t *testing.T, c kubernetes.Interface, ns, name string, data, labels map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: data}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating configmap %s/%s: %v", ns, name, err)
	}
	return cm
}

// names lists "namespace/name" of the configmaps a test made (not the
// kube-root-ca.crt of every namespace).
func names(cms []corev1.ConfigMap) []string {
	var out []string
	for _, cm := range ownConfigMaps(cms) {
		out = append(out, cm.Namespace+"/"+cm.Name)
	}
	return out
}

func TestProjectsAreIsolated(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "iso-a"), m.newProject(t, "iso-b")
	ca, cb := m.projectKube(t, a), m.projectKube(t, b)
	for _, c := range []kubernetes.Interface{ca, cb} {
		createNamespace(t, c, "default")
		createNamespace(t, c, "shared")
	}
	createConfigMap(t, ca, "default", "config", map[string]string{"owner": "a"}, map[string]string{"team": "a"})
	bConfig := createConfigMap(t, cb, "default", "config", map[string]string{"owner": "b"}, map[string]string{"team": "b"})
	createConfigMap(t, cb, "shared", "only-in-b", map[string]string{"secret": "b"}, map[string]string{"only": "b"})

	t.Run("get sees only the own object", func(t *testing.T) {
		got, err := ca.CoreV1().ConfigMaps("default").Get(ctx, "config", metav1.GetOptions{})
		if err != nil || got.Data["owner"] != "a" {
			t.Fatalf("A's config: %v %v", got.Data, err)
		}
		got, err = cb.CoreV1().ConfigMaps("default").Get(ctx, "config", metav1.GetOptions{})
		if err != nil || got.Data["owner"] != "b" {
			t.Fatalf("B's config: %v %v", got.Data, err)
		}
	})

	t.Run("an object of B is not found from A, with the same error as a missing one", func(t *testing.T) {
		_, errB := ca.CoreV1().ConfigMaps("shared").Get(ctx, "only-in-b", metav1.GetOptions{})
		_, errNone := ca.CoreV1().ConfigMaps("shared").Get(ctx, "in-no-project", metav1.GetOptions{})
		if !apierrors.IsNotFound(errB) || !apierrors.IsNotFound(errNone) {
			t.Fatalf("errors: %v / %v", errB, errNone)
		}
		if strings.ReplaceAll(errB.Error(), "only-in-b", "X") != strings.ReplaceAll(errNone.Error(), "in-no-project", "X") {
			t.Fatalf("error messages differ: %q vs %q", errB, errNone)
		}
		for _, rv := range []string{"", "0"} {
			if _, err := ca.CoreV1().ConfigMaps("shared").Get(ctx, "only-in-b", metav1.GetOptions{ResourceVersion: rv}); !apierrors.IsNotFound(err) {
				t.Fatalf("get with resourceVersion %q: %v", rv, err)
			}
		}
	})

	t.Run("list namespaced, across namespaces, and with selectors", func(t *testing.T) {
		for _, rv := range []string{"", "0"} {
			all, err := ca.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				t.Fatal(err)
			}
			if got := names(all.Items); len(got) != 1 || got[0] != "default/config" {
				t.Fatalf("A lists %v (rv %q)", got, rv)
			}
		}
		ns, err := ca.CoreV1().ConfigMaps("shared").List(ctx, metav1.ListOptions{})
		if err != nil || len(names(ns.Items)) != 0 {
			t.Fatalf("A's shared namespace lists %v %v", names(ns.Items), err)
		}
		byField, err := ca.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=only-in-b"})
		if err != nil || len(byField.Items) != 0 {
			t.Fatalf("field selector from A finds %v %v", names(byField.Items), err)
		}
		byLabel, err := ca.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: "only=b"})
		if err != nil || len(byLabel.Items) != 0 {
			t.Fatalf("label selector from A finds %v %v", names(byLabel.Items), err)
		}
		teamB, err := cb.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: "team=b"})
		if err != nil || len(teamB.Items) != 1 {
			t.Fatalf("B's own label selector finds %v %v", names(teamB.Items), err)
		}
		nsList, err := ca.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil || len(nsList.Items) != 3 {
			t.Fatalf("A has namespaces %v %v", nsList.Items, err)
		}
	})

	t.Run("paginated list stays in the project", func(t *testing.T) {
		for i := range 5 {
			createConfigMap(t, ca, "shared", fmt.Sprintf("page-%d", i), nil, nil)
			createConfigMap(t, cb, "shared", fmt.Sprintf("page-%d", i), nil, nil)
		}
		var seen []string
		opts := metav1.ListOptions{Limit: 2}
		for {
			page, err := ca.CoreV1().ConfigMaps("shared").List(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, names(page.Items)...)
			if page.Continue == "" {
				break
			}
			opts.Continue = page.Continue
		}
		if len(seen) != 5 {
			t.Fatalf("A pages through %v, want its 5 configmaps", seen)
		}
	})

	t.Run("patch, update and delete of B's object from A fail and leave it intact", func(t *testing.T) {
		_, err := ca.CoreV1().ConfigMaps("shared").Patch(ctx, "only-in-b", types.MergePatchType, []byte(`{"data":{"secret":"stolen"}}`), metav1.PatchOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("patch: %v", err)
		}
		forged := bConfig.DeepCopy()
		forged.Data = map[string]string{"owner": "a-was-here"}
		if _, err := ca.CoreV1().ConfigMaps("default").Update(ctx, forged, metav1.UpdateOptions{}); !apierrors.IsConflict(err) && !apierrors.IsInvalid(err) {
			// A has its own default/config with another UID and resourceVersion: the
			// update must not reach B's object, whatever A's answer is.
			t.Logf("update with B's resourceVersion from A: %v", err)
		}
		if err := ca.CoreV1().ConfigMaps("shared").Delete(ctx, "only-in-b", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("delete: %v", err)
		}
		got, err := cb.CoreV1().ConfigMaps("shared").Get(ctx, "only-in-b", metav1.GetOptions{})
		if err != nil || got.Data["secret"] != "b" {
			t.Fatalf("B's object after A's attempts: %v %v", got, err)
		}
		gotConfig, err := cb.CoreV1().ConfigMaps("default").Get(ctx, "config", metav1.GetOptions{})
		if err != nil || gotConfig.Data["owner"] != "b" {
			t.Fatalf("B's config after A's update: %v %v", gotConfig.Data, err)
		}
	})

	t.Run("deletecollection in A leaves B's objects", func(t *testing.T) {
		if err := ca.CoreV1().ConfigMaps("shared").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		left, err := cb.CoreV1().ConfigMaps("shared").List(ctx, metav1.ListOptions{})
		if err != nil || len(names(left.Items)) != 6 {
			t.Fatalf("B's shared namespace after A's deletecollection: %v %v", names(left.Items), err)
		}
		gone, err := ca.CoreV1().ConfigMaps("shared").List(ctx, metav1.ListOptions{})
		if err != nil || len(names(gone.Items)) != 0 {
			t.Fatalf("A's shared namespace after deletecollection: %v %v", names(gone.Items), err)
		}
	})

	t.Run("owner references do not reach across projects", func(t *testing.T) {
		// A's object is owned by one of A's and names B's object (by its
		// name and real UID) as another owner: in A that owner does not
		// exist, so the reference dangles and is dropped, whatever B does.
		aOwner := createConfigMap(t, ca, "default", "a-owner", nil, nil)
		owned := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: aOwner.Name, UID: aOwner.UID},
			{APIVersion: "v1", Kind: "ConfigMap", Name: "only-in-b", UID: bConfig.UID},
		}}}
		if _, err := ca.CoreV1().ConfigMaps("default").Create(ctx, owned, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cb.CoreV1().ConfigMaps("default").Delete(ctx, "config", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the reference to B's object dropped from A's", func() error {
			got, err := ca.CoreV1().ConfigMaps("default").Get(ctx, "owned", metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("deleting B's object affected A's: %w", err)
			}
			if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != aOwner.UID {
				return fmt.Errorf("references %v", got.OwnerReferences)
			}
			return nil
		})
		if _, err := cb.CoreV1().ConfigMaps("shared").Get(ctx, "only-in-b", metav1.GetOptions{}); err != nil {
			t.Fatalf("B's object named by A's reference: %v", err)
		}
	})
}

// collectUntil reads events until one for an object named stop arrives.
func collectUntil(t *testing.T, w watch.Interface, stop string) []watch.Event {
	t.Helper()
	var events []watch.Event
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed early after %d events", len(events))
			}
			events = append(events, ev)
			if m, ok := ev.Object.(metav1.Object); ok && m.GetName() == stop {
				return events
			}
		case <-timeout:
			t.Fatalf("no event for %s within 30s; got %d events", stop, len(events))
		}
	}
}

func TestWatchSeesOnlyTheOwnProject(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "watch-a"), m.newProject(t, "watch-b")
	ca, cb := m.projectKube(t, a), m.projectKube(t, b)
	createNamespace(t, ca, "default")
	createNamespace(t, cb, "default")
	first := createConfigMap(t, ca, "default", "first", nil, nil)
	createConfigMap(t, cb, "default", "b-before", nil, nil)

	for _, rv := range []string{"", "0", first.ResourceVersion} {
		t.Run("from resourceVersion "+rv, func(t *testing.T) {
			w, err := ca.CoreV1().ConfigMaps("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			suffix := rv
			if suffix == "" {
				suffix = "latest"
			}
			createConfigMap(t, cb, "default", "b-during-"+suffix, nil, nil)
			createConfigMap(t, ca, "default", "a-sentinel-"+suffix, nil, nil)
			for _, ev := range collectUntil(t, w, "a-sentinel-"+suffix) {
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					t.Fatalf("unexpected event %v %T", ev.Type, ev.Object)
				}
				if strings.HasPrefix(cm.Name, "b-") || cm.Annotations[tenantAnnotation] != a {
					t.Fatalf("A's watch delivered %s/%s of %q", cm.Namespace, cm.Name, cm.Annotations[tenantAnnotation])
				}
			}
		})
	}
}

func TestTenantAwareNamespaceAdmission(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "adm-a"), m.newProject(t, "adm-b")
	ca, cb := m.projectKube(t, a), m.projectKube(t, b)
	platform := m.kube(t)
	createNamespace(t, platform, "team-a")
	createNamespace(t, cb, "team-a")

	_, err := ca.CoreV1().ConfigMaps("team-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `namespaces "team-a" not found`) {
		t.Fatalf("create in a namespace only the platform and B have: %v, want NotFound", err)
	}
	createNamespace(t, ca, "team-a")
	createConfigMap(t, ca, "team-a", "x", nil, nil)

	t.Run("a terminating namespace refuses new objects only in its project", func(t *testing.T) {
		createNamespace(t, ca, "ending")
		createNamespace(t, cb, "ending")
		// The namespace keeps its "kubernetes" finalizer, so it stays Terminating.
		if err := ca.CoreV1().Namespaces().Delete(ctx, "ending", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// Admission reads the namespace from the watch cache, which may lag the
		// delete (as upstream's informer does; longer on SQL storage).
		eventually(t, "a create in A's terminating namespace is refused", func() error {
			_, err := ca.CoreV1().ConfigMaps("ending").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "late-"}}, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "being terminated") {
				return fmt.Errorf("create: %v", err)
			}
			return nil
		})
		createConfigMap(t, cb, "ending", "fine", nil, nil)
	})

	t.Run("immortal namespaces", func(t *testing.T) {
		createNamespace(t, ca, "default")
		if err := ca.CoreV1().Namespaces().Delete(ctx, "default", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("deleting default: %v", err)
		}
	})
}

func TestTenantAnnotationCannotBeForged(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "forge-a"), m.newProject(t, "forge-b")
	ca, cb := m.projectKube(t, a), m.projectKube(t, b)
	createNamespace(t, ca, "default")
	createNamespace(t, cb, "default")

	forged, err := ca.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "forged", Annotations: map[string]string{tenantAnnotation: b}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if forged.Annotations[tenantAnnotation] != a {
		t.Fatalf("create: annotation %q, want %q", forged.Annotations[tenantAnnotation], a)
	}
	if _, err := cb.CoreV1().ConfigMaps("default").Get(ctx, "forged", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the forged object is visible in B: %v", err)
	}
	patched, err := ca.CoreV1().ConfigMaps("default").Patch(ctx, "forged", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, tenantAnnotation, b)), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if patched.Annotations[tenantAnnotation] != a {
		t.Fatalf("patch: annotation %q, want %q", patched.Annotations[tenantAnnotation], a)
	}
	removed, err := ca.CoreV1().ConfigMaps("default").Patch(ctx, "forged", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/metadata/annotations/tenancy.miloapis.com~1project"}]`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if removed.Annotations[tenantAnnotation] != a {
		t.Fatalf("removing the annotation: %q, want %q", removed.Annotations[tenantAnnotation], a)
	}

	platform, err := m.kube(t).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("platform-forged-%d", projectSeq.Add(1)), Annotations: map[string]string{tenantAnnotation: a}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := platform.Annotations[tenantAnnotation]; ok {
		t.Fatalf("a platform object kept a tenant annotation: %v", platform.Annotations)
	}
	if _, err := ca.CoreV1().ConfigMaps("default").Get(ctx, platform.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a platform object is visible in A: %v", err)
	}
}

func TestUnknownProjectIsNotFoundAndWritesNothing(t *testing.T) {
	m := shared
	ctx := context.Background()
	for _, name := range []string{"no-such-project", "Not_A_Name"} {
		c := m.projectKube(t, name)
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		var status apierrors.APIStatus
		if !apierrors.IsNotFound(err) {
			t.Fatalf("%s: create: %v, want NotFound", name, err)
		}
		if s, ok := err.(apierrors.APIStatus); ok {
			status = s
		}
		if status == nil || !strings.Contains(status.Status().Message, `projects.resourcemanager.miloapis.com "`+name+`" not found`) {
			t.Fatalf("%s: message does not name the project: %v", name, err)
		}
	}
	// Creating the project afterwards shows nothing was written for it.
	name := fmt.Sprintf("late-project-%d", projectSeq.Add(1))
	if _, err := m.projectKube(t, name).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("create before the project exists: %v", err)
	}
	m.createProject(t, name)
	m.waitProjectReady(t, name)
	list, err := m.projectKube(t, name).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil || namespaceNames(list.Items) != "default kube-system" {
		t.Fatalf("a new project holds namespaces %v %v, want default and kube-system", list.Items, err)
	}
	if cms, err := m.projectKube(t, name).CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); err != nil || len(ownConfigMaps(cms.Items)) != 0 {
		t.Fatalf("a new project holds configmaps %v %v", cms, err)
	}
}

func TestAllProjectsViewListsAndWatchesOnly(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "all-a"), m.newProject(t, "all-b")
	ca, cb := m.projectKube(t, a), m.projectKube(t, b)
	createNamespace(t, ca, "default")
	createNamespace(t, cb, "default")
	all := m.projectKube(t, "*")

	w, err := all.CoreV1().ConfigMaps("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	createConfigMap(t, ca, "default", "from-a", nil, nil)
	createConfigMap(t, cb, "default", "from-b", nil, nil)
	createConfigMap(t, ca, "default", "from-a-again", nil, nil)

	var order []string
	var lastRV int64
	for _, ev := range collectUntil(t, w, "from-a-again") {
		cm := ev.Object.(*corev1.ConfigMap)
		project := cm.Annotations[tenantAnnotation]
		if (project != a && project != b) || cm.Name == "kube-root-ca.crt" {
			continue // other tests' projects share the server; every namespace has its root CA
		}
		var rv int64
		fmt.Sscan(cm.ResourceVersion, &rv)
		if rv <= lastRV {
			t.Fatalf("resourceVersions out of order: %d after %d", rv, lastRV)
		}
		lastRV = rv
		order = append(order, project+"/"+cm.Name)
	}
	want := []string{a + "/from-a", b + "/from-b", a + "/from-a-again"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", order, want)
	}

	list, err := all.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, cm := range list.Items {
		p := cm.Annotations[tenantAnnotation]
		if p == "" {
			t.Fatalf("the all-projects view shows a platform object %s/%s", cm.Namespace, cm.Name)
		}
		seen[p+"/"+cm.Name] = true
	}
	if !seen[a+"/from-a"] || !seen[b+"/from-b"] {
		t.Fatalf("the all-projects list misses objects: %v", seen)
	}

	_, err = all.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nope"}}, metav1.CreateOptions{})
	if !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("create in the all-projects view: %v, want 405", err)
	}
	if err := all.CoreV1().ConfigMaps("default").Delete(ctx, "from-a", metav1.DeleteOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("delete in the all-projects view: %v, want 405", err)
	}
	if _, err := all.CoreV1().ConfigMaps("default").Get(ctx, "from-a", metav1.GetOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("get in the all-projects view: %v, want 405", err)
	}
}

func TestPlatformOnlyKindsAreHiddenInProjects(t *testing.T) {
	m := shared
	p := m.newProject(t, "hidden")
	kc := m.projectKubeconfig(t, p)

	out := m.kubectlWith(t, kc, "", "api-resources", "-o", "name")
	if out.err != nil {
		t.Fatalf("api-resources: %v %s", out.err, out.stderr)
	}
	got := strings.Fields(out.stdout)
	for _, hidden := range []string{"projects.resourcemanager.miloapis.com", "organizations.resourcemanager.miloapis.com",
		"apiservices.apiregistration.k8s.io", "flowschemas.flowcontrol.apiserver.k8s.io",
		"roles.iam.miloapis.com", "policybindings.iam.miloapis.com"} {
		for _, g := range got {
			if g == hidden {
				t.Errorf("project discovery lists %s", hidden)
			}
		}
	}
	// The shared server serves project-local CRDs (--project-crds).
	for _, want := range []string{"configmaps", "namespaces", "secrets", "roles.rbac.authorization.k8s.io", "leases.coordination.k8s.io", "serviceaccounts.iam.miloapis.com",
		"customresourcedefinitions.apiextensions.k8s.io"} {
		found := false
		for _, g := range got {
			found = found || g == want
		}
		if !found {
			t.Errorf("project discovery misses %s: %v", want, got)
		}
	}
	r := m.kubectlWith(t, kc, "", "get", "--raw", "/apis/apiregistration.k8s.io/v1/apiservices")
	if r.err == nil || !strings.Contains(r.stderr, "NotFound") {
		t.Fatalf("APIServices in a project: %v %s %s", r.err, r.stdout, r.stderr)
	}
	r = m.kubectlWith(t, kc, "", "get", "--raw", "/apis/resourcemanager.miloapis.com/v1alpha1/projects")
	if r.err == nil || !strings.Contains(r.stderr, "NotFound") {
		t.Fatalf("projects in a project: %v %s %s", r.err, r.stdout, r.stderr)
	}
	// kubectl explain reads OpenAPI v3 through the project URL.
	if out := m.kubectlWith(t, kc, "", "explain", "configmap.data"); out.err != nil || !strings.Contains(out.stdout, "ConfigMap") {
		t.Fatalf("explain in a project: %v %s %s", out.err, out.stdout, out.stderr)
	}
}

func TestKubectlInsideAProject(t *testing.T) {
	m := shared
	a, b := m.newProject(t, "kubectl-a"), m.newProject(t, "kubectl-b")
	ka, kb := m.projectKubeconfig(t, a), m.projectKubeconfig(t, b)
	apply := func(kc, value string) {
		t.Helper()
		manifest := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: default}\ndata: {value: %q}\n", value)
		if r := m.kubectlWith(t, kc, manifest, "apply", "--server-side", "-f", "-"); r.err != nil {
			t.Fatalf("apply: %v %s", r.err, r.stderr)
		}
	}
	apply(ka, "from-a")
	apply(kb, "from-b")
	for kc, want := range map[string]string{ka: "from-a", kb: "from-b"} {
		r := m.kubectlWith(t, kc, "", "get", "configmap", "app", "-o", "jsonpath={.data.value}")
		if r.err != nil || r.stdout != want {
			t.Fatalf("get app: %q %v %s, want %q", r.stdout, r.err, r.stderr, want)
		}
	}
	if r := m.kubectlWith(t, ka, "", "get", "configmaps", "-A", "-o", "name", "--field-selector", "metadata.name!=kube-root-ca.crt"); r.err != nil || strings.TrimSpace(r.stdout) != "configmap/app" {
		t.Fatalf("get configmaps -A: %q %v %s", r.stdout, r.err, r.stderr)
	}
	if r := m.kubectlWith(t, ka, "", "delete", "configmap", "app"); r.err != nil {
		t.Fatalf("delete: %v %s", r.err, r.stderr)
	}
	if r := m.kubectlWith(t, kb, "", "get", "configmap", "app", "-o", "name"); r.err != nil || strings.TrimSpace(r.stdout) != "configmap/app" {
		t.Fatalf("B's app after A deleted its own: %q %v %s", r.stdout, r.err, r.stderr)
	}
}

const widgetsCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, categories: [all]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  names: {kind: Gadget, plural: gadgets, singular: gadget}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {color: {type: string}}}
`

func TestCustomResourcesAreIsolated(t *testing.T) {
	m := shared
	ctx := context.Background()
	m.mustKubectl(t, widgetsCRD, "apply", "-f", "-")
	m.waitEstablished(t, "crd/widgets.example.com", "crd/gadgets.example.com")

	a, b := m.newProject(t, "cr-a"), m.newProject(t, "cr-b")
	ka, kb := m.projectKubeconfig(t, a), m.projectKubeconfig(t, b)
	for kc, size := range map[string]int{ka: 1, kb: 2} {
		manifest := fmt.Sprintf("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: default}\nspec: {size: %d}\n---\napiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\nspec: {color: c%d}\n", size, size)
		// Discovery of a just-installed CRD can lag in a fresh kubectl cache; retry briefly.
		var r kubectlResult
		for i := 0; i < 20; i++ {
			if r = m.kubectlWith(t, kc, manifest, "apply", "-f", "-"); r.err == nil {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if r.err != nil {
			t.Fatalf("apply custom resources: %v %s", r.err, r.stderr)
		}
	}
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	gadgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}
	for project, want := range map[string]int64{a: 1, b: 2} {
		c := m.projectDynamic(t, project)
		w, err := c.Resource(widgets).Namespace("default").Get(ctx, "w", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size != want {
			t.Fatalf("%s sees widget size %d, want %d", project, size, want)
		}
		list, err := c.Resource(gadgets).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("%s lists gadgets %v %v", project, list, err)
		}
		if color, _, _ := unstructured.NestedString(list.Items[0].Object, "spec", "color"); color != fmt.Sprintf("c%d", want) {
			t.Fatalf("%s sees gadget color %s", project, color)
		}
		if list.Items[0].GetAnnotations()[tenantAnnotation] != project {
			t.Fatalf("gadget annotation %v", list.Items[0].GetAnnotations())
		}
	}
	if err := m.projectDynamic(t, a).Resource(gadgets).Delete(ctx, "g", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.projectDynamic(t, b).Resource(gadgets).Get(ctx, "g", metav1.GetOptions{}); err != nil {
		t.Fatalf("B's gadget after A deleted its own: %v", err)
	}
	// The platform's own view of the CRD's resources is empty: instances live in projects.
	if list, err := m.dynamic(t).Resource(widgets).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("platform lists widgets %v %v", list, err)
	}
	r := m.kubectlWith(t, ka, "", "get", "all", "-A", "-o", "name")
	if r.err != nil || strings.TrimSpace(r.stdout) != "widget.example.com/w" {
		t.Fatalf("get all -A in A: %q %v %s", r.stdout, r.err, r.stderr)
	}
	all, err := m.projectDynamic(t, "*").Resource(widgets).List(ctx, metav1.ListOptions{})
	if err != nil || len(all.Items) != 2 {
		t.Fatalf("all-projects widgets: %v %v", all, err)
	}

	// Deleting the CRD takes every project's instances with it: a CRD of the same
	// name installed again starts empty everywhere.
	m.mustKubectl(t, "", "delete", "crd", "gadgets.example.com", "--wait=true")
	m.mustKubectl(t, widgetsCRD, "apply", "-f", "-")
	m.waitEstablished(t, "crd/gadgets.example.com")
	eventually(t, "gadgets are served again", func() error {
		list, err := m.projectDynamic(t, b).Resource(gadgets).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 0 {
			t.Fatalf("B's gadget survived the deletion of its CRD: %v", list.Items[0].GetName())
		}
		return nil
	})
}

func TestResourceQuotaLimitsOnlyItsProject(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "quota-a"), m.newProject(t, "quota-b")
	ca, cb := m.projectKube(t, a), m.projectKube(t, b)
	platform := m.kube(t)
	for _, c := range []kubernetes.Interface{ca, cb, platform} {
		createNamespace(t, c, "quota-test")
	}
	quota := func(hard corev1.ResourceList) *corev1.ResourceQuota {
		return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "objects"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	}
	// Every namespace's kube-root-ca.crt counts, as in any cluster: let it exist first.
	eventually(t, "A's kube-root-ca.crt", func() error {
		_, err := ca.CoreV1().ConfigMaps("quota-test").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
	if _, err := ca.CoreV1().ResourceQuotas("quota-test").Create(ctx, quota(corev1.ResourceList{
		"count/configmaps": resource.MustParse("3"), "secrets": resource.MustParse("1")}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The platform's namespace of the same name allows no configmaps at all.
	if _, err := platform.CoreV1().ResourceQuotas("quota-test").Create(ctx, quota(corev1.ResourceList{
		"count/configmaps": resource.MustParse("0")}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Admission reads quotas from the watch cache; wait until it has A's.
	eventually(t, "A's quota reaches the cache", func() error {
		list, err := ca.CoreV1().ResourceQuotas("quota-test").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil || len(list.Items) != 1 {
			return fmt.Errorf("quotas %v %v", list, err)
		}
		return nil
	})
	createConfigMap(t, ca, "quota-test", "one", nil, nil)
	createConfigMap(t, ca, "quota-test", "two", nil, nil)
	_, err := ca.CoreV1().ConfigMaps("quota-test").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "three"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: objects") {
		t.Fatalf("over A's quota: %v, want Forbidden naming the quota", err)
	}
	if list, _ := ca.CoreV1().ConfigMaps("quota-test").List(ctx, metav1.ListOptions{}); len(list.Items) > 3 {
		t.Fatalf("A holds %d configmaps under a quota of 3", len(list.Items))
	}
	if _, err := ca.CoreV1().Secrets("quota-test").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "one"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.CoreV1().Secrets("quota-test").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "two"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("second secret under the legacy 'secrets: 1' quota: %v", err)
	}
	// B is not charged for A's objects, and the platform's quota on its namespace
	// of the same name does not reach the projects.
	for i := range 3 {
		createConfigMap(t, cb, "quota-test", fmt.Sprintf("b-%d", i), nil, nil)
	}
}

// configMapPolicy installs on the platform a ValidatingAdmissionPolicy named
// name, and its binding, that denies operation on ConfigMaps, in every
// project, unless the CEL expression holds; both go when the test ends.
func (m *milo) configMapPolicy(t *testing.T, name, operation, expression, message string) {
	t.Helper()
	m.mustKubectl(t, fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: %[1]s}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: [%[2]q]
      resources: ["configmaps"]
  validations:
  - expression: %[3]q
    message: %[4]q
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: %[1]s}
spec:
  policyName: %[1]s
  validationActions: [Deny]
`, name, operation, expression, message), "apply", "-f", "-")
	t.Cleanup(func() {
		m.kubectl(t, "", "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name)
	})
}

// Admission policies are platform-wide: installed at /, they apply to every
// project's requests and see the true project of each object.
func TestPlatformAdmissionPolicyAppliesToProjects(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "vap-a"), m.newProject(t, "vap-b")
	ca, cb := m.projectKube(t, a), m.projectKube(t, b)
	createNamespace(t, ca, "default")
	createNamespace(t, cb, "default")
	m.configMapPolicy(t, "freeze-"+a, "CREATE",
		fmt.Sprintf("!has(object.metadata.annotations) || object.metadata.annotations[?'tenancy.miloapis.com/project'].orValue('') != '%s'", a),
		"project "+a+" is frozen")

	eventually(t, "the policy denies in A", func() error {
		_, err := ca.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "x-"}}, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "project "+a+" is frozen") {
			return fmt.Errorf("create in A: %v", err)
		}
		return nil
	})
	// B is not frozen, even when its client writes A's name into the annotation.
	if _, err := cb.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "claims-a", Annotations: map[string]string{tenantAnnotation: a}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create in B: %v", err)
	}
	// And A cannot escape the policy by claiming to be B.
	if _, err := ca.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "claims-b", Annotations: map[string]string{tenantAnnotation: b}}}, metav1.CreateOptions{}); err == nil {
		t.Fatal("A escaped the policy with a forged annotation")
	}
	// The policy's kinds stay platform-only.
	if _, err := m.projectDynamic(t, a).Resource(schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}).
		List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("admission policies listed in a project: %v", err)
	}
}
