package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const sprocketsCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: sprockets.example.org}
spec:
  group: example.org
  names: {kind: Sprocket, plural: sprockets, singular: sprocket}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// Deleting a namespace in a project deletes everything in it, built-in kinds
// and custom resources, waits for an object's finalizer with the upstream
// conditions, then removes the namespace; a namespace of the same name in
// another project is untouched. The same on the platform.
func TestNamespaceDeletionEmptiesTheNamespace(t *testing.T) {
	m := shared
	ctx := context.Background()
	m.mustKubectl(t, sprocketsCRD, "apply", "-f", "-")
	m.waitEstablished(t, "crd/sprockets.example.org")
	sprockets := schema.GroupVersionResource{Group: "example.org", Version: "v1", Resource: "sprockets"}

	a, b := m.newProject(t, "nsdel-a"), m.newProject(t, "nsdel-b")
	content := `apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: team}
---
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: team}
---
apiVersion: example.org/v1
kind: Sprocket
metadata: {name: s, namespace: team}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: held, namespace: team, finalizers: [example.com/hold]}
`
	for _, p := range []string{a, b} {
		kc := m.projectKubeconfig(t, p)
		eventuallyKubectl(t, m, kc, "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n", "apply", "-f", "-")
		eventuallyKubectl(t, m, kc, content, "apply", "-f", "-")
	}
	ka := m.projectKubeconfig(t, a)
	if r := m.kubectlWith(t, ka, "", "delete", "namespace", "team", "--wait=false"); r.err != nil {
		t.Fatalf("delete namespace: %v %s", r.err, r.stderr)
	}
	ca := m.projectKube(t, a)
	eventually(t, "the namespace's content deleted but the held configmap", func() error {
		ns, err := ca.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cond := map[corev1.NamespaceConditionType]corev1.ConditionStatus{}
		for _, c := range ns.Status.Conditions {
			cond[c.Type] = c.Status
		}
		if cond[corev1.NamespaceFinalizersRemaining] != corev1.ConditionTrue || cond[corev1.NamespaceContentRemaining] != corev1.ConditionTrue {
			return fmt.Errorf("conditions %v", ns.Status.Conditions)
		}
		if _, err := ca.CoreV1().Secrets("team").Get(ctx, "token", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the secret is still there: %v", err)
		}
		if _, err := m.projectDynamic(t, a).Resource(sprockets).Namespace("team").Get(ctx, "s", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the custom resource is still there: %v", err)
		}
		return nil
	})
	if _, err := ca.CoreV1().ConfigMaps("team").Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the namespace gone", func() error {
		_, err := ca.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	// B's namespace of the same name, and its content, are untouched.
	cb := m.projectKube(t, b)
	if ns, err := cb.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{}); err != nil || ns.DeletionTimestamp != nil {
		t.Fatalf("B's namespace: %v %v", ns, err)
	}
	for _, name := range []string{"settings", "held"} {
		if _, err := cb.CoreV1().ConfigMaps("team").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("B's %s: %v", name, err)
		}
	}
	if _, err := m.projectDynamic(t, b).Resource(sprockets).Namespace("team").Get(ctx, "s", metav1.GetOptions{}); err != nil {
		t.Fatalf("B's custom resource: %v", err)
	}
	cb.CoreV1().ConfigMaps("team").Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}) //nolint:errcheck

	// The platform's namespaces too.
	name := fmt.Sprintf("platform-nsdel-%d", projectSeq.Add(1))
	m.mustKubectl(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+name+"}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: "+name+"}\n", "apply", "-f", "-")
	m.mustKubectl(t, "", "delete", "namespace", name, "--timeout=60s")
	if _, err := m.kube(t).CoreV1().ConfigMaps(name).Get(ctx, "c", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the platform namespace's configmap after its deletion: %v", err)
	}
}

// servingCA is the PEM bundle of the CA the admin kubeconfig trusts.
func (m *milo) servingCA(t *testing.T) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := rest.LoadTLSFiles(cfg); err != nil {
		t.Fatal(err)
	}
	return string(cfg.CAData)
}

// Every namespace, in every project and on the platform, gets a default
// ServiceAccount and the kube-root-ca.crt ConfigMap with the CA clients trust;
// both come back when deleted, the ConfigMap when edited.
func TestEveryNamespaceHasDefaultServiceAccountAndRootCA(t *testing.T) {
	m := shared
	ctx := context.Background()
	wantCA := m.servingCA(t)
	p := m.newProject(t, "sa")
	name := fmt.Sprintf("sa-%d", projectSeq.Add(1))
	for where, client := range map[string]kubernetes.Interface{"project": m.projectKube(t, p), "platform": m.kube(t)} {
		core := client.CoreV1()
		if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		check := func() error {
			if _, err := core.ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return err
			}
			cm, err := core.ConfigMaps(name).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cm.Data["ca.crt"] != wantCA {
				return fmt.Errorf("ca.crt is %.60q", cm.Data["ca.crt"])
			}
			return nil
		}
		eventuallyWithin(t, time.Minute, where+": default ServiceAccount and kube-root-ca.crt", check)
		if err := core.ServiceAccounts(name).Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := core.ConfigMaps(name).Patch(ctx, "kube-root-ca.crt", types.MergePatchType, []byte(`{"data":{"ca.crt":"forged"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventuallyWithin(t, time.Minute, where+": both restored", check)
		if !strings.Contains(wantCA, "BEGIN CERTIFICATE") {
			t.Fatalf("the CA is not PEM: %.60q", wantCA)
		}
	}
}

// TestNewProjectIsReadyWithItsBootstrap: a Project is created Ready, with
// its namespaces, their default ServiceAccounts and kube-root-ca.crt stored
// in the same transaction, in its own storage: usable by the next request,
// and the same objects the controllers give a namespace created later. A
// dry run stores none of them.
func TestNewProjectIsReadyWithItsBootstrap(t *testing.T) {
	m := shared
	ctx := context.Background()
	ca := m.servingCA(t)
	name := fmt.Sprintf("boot-%d", projectSeq.Add(1))
	project := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": "acme"}},
	}}
	projects := m.dynamic(t).Resource(projectsGVR)
	if _, err := projects.Create(ctx, project.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	created, err := projects.Create(ctx, project, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(created.Object, "status", "conditions")
	if len(conds) != 1 || conds[0].(map[string]any)["type"] != "Ready" || conds[0].(map[string]any)["status"] != "True" ||
		conds[0].(map[string]any)["reason"] != "ControlPlaneReady" {
		t.Fatalf("created with conditions %v", conds)
	}

	// Usable at once: no wait. And stored in the Project's transaction:
	// every object of the bootstrap at its revision.
	c := m.projectKube(t, name)
	// bootstrapped reads what the bootstrap (or the controllers) give a namespace.
	bootstrapped := func(ns string) []metav1.Object {
		t.Helper()
		n, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sa, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return []metav1.Object{n, sa, cm}
	}
	for _, ns := range []string{"default", "kube-system"} {
		for _, o := range bootstrapped(ns) {
			if o.GetResourceVersion() != created.GetResourceVersion() {
				t.Errorf("%T %s/%s at revision %s, the Project at %s: not one transaction", o, ns, o.GetName(), o.GetResourceVersion(), created.GetResourceVersion())
			}
		}
	}
	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil || namespaceNames(nss.Items) != "default kube-system" {
		t.Fatalf("namespaces %v %v", nss, err)
	}
	createConfigMap(t, c, "default", "first", nil, nil)

	// The same objects as those the controllers give a namespace created
	// later, tenancy aside.
	createNamespace(t, c, "later")
	eventuallyWithin(t, time.Minute, "the later namespace's ServiceAccount and kube-root-ca.crt", func() error {
		if _, err := c.CoreV1().ServiceAccounts("later").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := c.CoreV1().ConfigMaps("later").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
	id := "p." + string(created.GetUID())
	shape := func(o metav1.Object) string {
		annotations := map[string]string{}
		for k, v := range o.GetAnnotations() {
			annotations[k] = v
		}
		if annotations[tenantAnnotation] != name || annotations["tenancy.miloapis.com/project-id"] != id {
			t.Errorf("%s/%s is stamped %v, want project %s with id %s", o.GetNamespace(), o.GetName(), annotations, name, id)
		}
		delete(annotations, tenantAnnotation)
		delete(annotations, "tenancy.miloapis.com/project-id")
		labels := map[string]string{}
		for k, v := range o.GetLabels() {
			labels[k] = strings.ReplaceAll(v, o.GetName(), "NAME")
		}
		return fmt.Sprintf("labels %v annotations %v finalizers %v owners %v", labels, annotations, o.GetFinalizers(), o.GetOwnerReferences())
	}
	later := bootstrapped("later")
	for _, ns := range []string{"default", "kube-system"} {
		for i, got := range bootstrapped(ns) {
			want := later[i]
			if shape(got) != shape(want) || got.GetUID() == "" || got.GetCreationTimestamp().Time.IsZero() {
				t.Errorf("%T in %s: %s, in a namespace created later: %s", got, ns, shape(got), shape(want))
			}
			switch got := got.(type) {
			case *corev1.Namespace:
				want := want.(*corev1.Namespace)
				if fmt.Sprint(got.Spec, got.Status) != fmt.Sprint(want.Spec, want.Status) {
					t.Errorf("namespace %s: %v %v, a namespace created later: %v %v", ns, got.Spec, got.Status, want.Spec, want.Status)
				}
			case *corev1.ConfigMap:
				want := want.(*corev1.ConfigMap)
				if got.Data["ca.crt"] != ca || fmt.Sprint(got.Data) != fmt.Sprint(want.Data) {
					t.Errorf("kube-root-ca.crt in %s holds %.60v, in a namespace created later %.60v", ns, got.Data, want.Data)
				}
			}
		}
	}

	// In the all-projects view, the project's namespaces are its own, and
	// the dry run stored none.
	all, err := m.projectKube(t, "*").CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, ns := range all.Items {
		if ns.Annotations[tenantAnnotation] == name {
			seen = append(seen, ns.Name+"@"+ns.Annotations["tenancy.miloapis.com/project-id"])
		}
	}
	slices.Sort(seen)
	if want := []string{"default@" + id, "kube-system@" + id, "later@" + id}; !slices.Equal(seen, want) {
		t.Fatalf("the all-projects view shows namespaces %v of %s, want %v", seen, name, want)
	}
}

// ownConfigMaps leaves out the kube-root-ca.crt every namespace gets.
func ownConfigMaps(items []corev1.ConfigMap) []corev1.ConfigMap {
	var out []corev1.ConfigMap
	for _, cm := range items {
		if cm.Name != "kube-root-ca.crt" {
			out = append(out, cm)
		}
	}
	return out
}

// A project's aggregated ClusterRole gets the rules of the project's own
// ClusterRoles it selects, and of no other project's.
func TestAggregatedClusterRolesInAProject(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "agg-a"), m.newProject(t, "agg-b")
	manifest := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: monitoring}
aggregationRule:
  clusterRoleSelectors: [{matchLabels: {example.com/aggregate-to-monitoring: "true"}}]
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: monitoring-%[1]s, labels: {example.com/aggregate-to-monitoring: "true"}}
rules: [{apiGroups: [""], resources: [%[1]s], verbs: [get, list]}]
`
	eventuallyKubectl(t, m, m.projectKubeconfig(t, a), fmt.Sprintf(manifest, "configmaps"), "apply", "-f", "-")
	eventuallyKubectl(t, m, m.projectKubeconfig(t, b), fmt.Sprintf(manifest, "secrets"), "apply", "-f", "-")
	for p, want := range map[string]string{a: "configmaps", b: "secrets"} {
		eventually(t, "aggregated rules in "+p, func() error {
			role, err := m.projectKube(t, p).RbacV1().ClusterRoles().Get(ctx, "monitoring", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(role.Rules) != 1 || len(role.Rules[0].Resources) != 1 || role.Rules[0].Resources[0] != want {
				return fmt.Errorf("rules %v, want only %s", role.Rules, want)
			}
			return nil
		})
	}
}

// namespaceNames lists namespaces' names, space-separated, in order.
func namespaceNames(items []corev1.Namespace) string {
	var out []string
	for _, ns := range items {
		out = append(out, ns.Name)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// A new project has the namespaces tools assume of a cluster: default and
// kube-system, each with its default ServiceAccount and kube-root-ca.crt.
func TestNewProjectHasKubeSystem(t *testing.T) {
	m := shared
	p := m.newProject(t, "kube-system")
	kc := m.projectKubeconfig(t, p)
	if r := m.kubectlWith(t, kc, "", "get", "namespace", "kube-system", "-o", "name"); r.err != nil || strings.TrimSpace(r.stdout) != "namespace/kube-system" {
		t.Fatalf("kube-system in a new project: %q %v %s", r.stdout, r.err, r.stderr)
	}
	eventually(t, "kube-system's service account and root CA", func() error {
		if r := m.kubectlWith(t, kc, "", "-n", "kube-system", "get", "serviceaccount/default", "configmap/kube-root-ca.crt", "-o", "name"); r.err != nil {
			return fmt.Errorf("%v %s", r.err, r.stderr)
		}
		return nil
	})
	if r := m.kubectlWith(t, kc, "", "delete", "namespace", "kube-system"); r.err == nil {
		t.Fatal("kube-system of a project was deleted")
	}
}

// A ResourceQuota in a project reports what it limits, follows creates and
// deletions, and of many creates racing for its last units exactly as many
// pass as there are units.
func TestResourceQuotaStatusAndTheLastUnit(t *testing.T) {
	m := shared
	ctx := context.Background()
	p := m.newProject(t, "quota-race")
	c := m.projectKube(t, p)
	createNamespace(t, c, "race")
	eventually(t, "the namespace's own configmap", func() error {
		_, err := c.CoreV1().ConfigMaps("race").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
	const limit = 6 // kube-root-ca.crt and five more
	if _, err := c.CoreV1().ResourceQuotas("race").Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "objects"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse(fmt.Sprint(limit)), "requests.cpu": resource.MustParse("1")}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	status := func(want int64) func() error {
		return func() error {
			q, err := c.CoreV1().ResourceQuotas("race").Get(ctx, "objects", metav1.GetOptions{})
			if err != nil {
				return err
			}
			used := q.Status.Used["count/configmaps"]
			hard := q.Status.Hard["count/configmaps"]
			if used.Value() != want || hard.Value() != limit || q.Status.Used.Cpu().Value() != 0 {
				return fmt.Errorf("status %v, want used %d", q.Status, want)
			}
			return nil
		}
	}
	eventually(t, "the quota's status", status(1))
	// The reservations are the server's: a client cannot plant any.
	q, err := c.CoreV1().ResourceQuotas("race").Patch(ctx, "objects", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"quota.miloapis.com/reservations":"[{\"resource\":\"configmaps\",\"name\":\"x\",\"expires\":\"2999-01-01T00:00:00Z\"}]"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := q.Annotations["quota.miloapis.com/reservations"]; ok {
		t.Fatalf("a client planted reservations: %s", r)
	}

	// Twenty creates race for five units.
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := range 20 {
		wg.Go(func() {
			_, err := c.CoreV1().ConfigMaps("race").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("racer-%d", i)}}, metav1.CreateOptions{})
			switch {
			case err == nil:
				admitted.Add(1)
			case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota: objects"):
			default:
				t.Errorf("racer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	list, err := c.CoreV1().ConfigMaps("race").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if admitted.Load() != limit-1 || len(list.Items) != limit {
		t.Fatalf("%d creates admitted and %d configmaps stored under a quota of %d (one is kube-root-ca.crt)", admitted.Load(), len(list.Items), limit)
	}
	eventually(t, "the quota's status after the race", status(limit))

	// A deletion frees a unit at once for admission, and in the status by the next count.
	if err := c.CoreV1().ConfigMaps("race").Delete(ctx, list.Items[len(list.Items)-1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a create after a deletion", func() error {
		_, err := c.CoreV1().ConfigMaps("race").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-delete"}}, metav1.CreateOptions{})
		return err
	})
}

// Garbage collection in a project, with kubectl: background, foreground
// (--cascade=foreground waits for a blocking dependent) and orphan
// (--cascade=orphan keeps the dependent, without its reference); a
// reference to another project's owner, by name and UID, keeps nothing alive
// there and deletes nothing of that project.
func TestGarbageCollectionInAProject(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "gc-a"), m.newProject(t, "gc-b")
	ca, cb := m.projectKube(t, a), m.projectKube(t, b)
	ka := m.projectKubeconfig(t, a)
	owned := func(name string, owner *corev1.ConfigMap, block bool) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: &block}}}}
	}
	create := func(c kubernetes.Interface, cm *corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		out, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	gone := func(c kubernetes.Interface, name string) func() error {
		return func() error {
			_, err := c.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("%s still there: %v", name, err)
		}
	}

	// Background: the dependent goes after its owner.
	owner := create(ca, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}})
	create(ca, owned("dependent", owner, false))
	// The same names in B, and a B object naming A's owner by name and UID.
	bOwner := create(cb, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}})
	create(cb, owned("dependent", bOwner, false))
	create(cb, owned("claims-a", owner, true))
	if r := m.kubectlWith(t, ka, "", "delete", "configmap", "owner"); r.err != nil {
		t.Fatalf("delete owner: %v %s", r.err, r.stderr)
	}
	eventually(t, "A's dependent collected", gone(ca, "dependent"))
	// In B, A's owner never existed: the reference dangles, so that object is
	// collected as any with a missing owner; B's own objects stay.
	eventually(t, "B's object naming A's owner collected", gone(cb, "claims-a"))
	for _, name := range []string{"owner", "dependent"} {
		if _, err := cb.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("B's %s after A's deletion: %v", name, err)
		}
	}

	// Foreground: the owner waits for its blocking dependent.
	fgOwner := create(ca, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fg-owner"}})
	create(ca, owned("fg-dependent", fgOwner, true))
	if r := m.kubectlWith(t, ka, "", "delete", "configmap", "fg-owner", "--cascade=foreground", "--timeout=60s"); r.err != nil {
		t.Fatalf("delete --cascade=foreground: %v %s", r.err, r.stderr)
	}
	eventually(t, "the foreground owner gone", gone(ca, "fg-owner"))
	eventually(t, "its dependent gone", gone(ca, "fg-dependent"))

	// Orphan: the dependent stays, without its reference.
	orphanOwner := create(ca, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orphan-owner"}})
	create(ca, owned("orphan", orphanOwner, true))
	if r := m.kubectlWith(t, ka, "", "delete", "configmap", "orphan-owner", "--cascade=orphan", "--timeout=60s"); r.err != nil {
		t.Fatalf("delete --cascade=orphan: %v %s", r.err, r.stderr)
	}
	eventually(t, "the orphaning owner gone", gone(ca, "orphan-owner"))
	eventually(t, "the orphan kept without its reference", func() error {
		cm, err := ca.CoreV1().ConfigMaps("default").Get(ctx, "orphan", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(cm.OwnerReferences) != 0 {
			return fmt.Errorf("references %v", cm.OwnerReferences)
		}
		return nil
	})

	// A dependent with one owner left only loses its reference to the gone one.
	keep := create(ca, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keeper"}})
	leave := create(ca, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "leaver"}})
	two := owned("two-owners", keep, false)
	two.OwnerReferences = append(two.OwnerReferences, owned("", leave, false).OwnerReferences...)
	create(ca, two)
	if err := ca.CoreV1().ConfigMaps("default").Delete(ctx, "leaver", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the reference to the gone owner dropped", func() error {
		cm, err := ca.CoreV1().ConfigMaps("default").Get(ctx, "two-owners", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != keep.UID {
			return fmt.Errorf("references %v", cm.OwnerReferences)
		}
		return nil
	})
}

// namespaceCondition is the status of one condition of a namespace.
func namespaceCondition(ns *corev1.Namespace, t corev1.NamespaceConditionType) corev1.ConditionStatus {
	for _, c := range ns.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}
