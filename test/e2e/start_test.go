package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"go.miloapis.com/milo/pkg/tenancy"
)

var organizations = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "organizations"}

func TestAPIResourcesListCoreAndMiloKinds(t *testing.T) {
	out := shared.mustKubectl(t, "", "api-resources", "-o", "name")
	got := map[string]bool{}
	for _, line := range strings.Fields(out) {
		got[line] = true
	}
	for _, want := range []string{
		"configmaps", "secrets", "namespaces", "serviceaccounts", "events", "limitranges", "resourcequotas",
		"leases.coordination.k8s.io", "roles.rbac.authorization.k8s.io", "customresourcedefinitions.apiextensions.k8s.io",
		"organizations.resourcemanager.miloapis.com", "folders.resourcemanager.miloapis.com",
		"projects.resourcemanager.miloapis.com", "organizationmemberships.resourcemanager.miloapis.com",
		"roles.iam.miloapis.com", "policybindings.iam.miloapis.com", "users.iam.miloapis.com", "groups.iam.miloapis.com",
		"groupmemberships.iam.miloapis.com", "serviceaccounts.iam.miloapis.com", "protectedresources.iam.miloapis.com",
	} {
		if !got[want] {
			t.Errorf("api-resources does not list %s; got:\n%s", want, out)
		}
	}
	// The default RBAC policy is bootstrapped.
	for _, role := range []string{"cluster-admin", "admin", "edit", "view", "system:discovery"} {
		shared.mustKubectl(t, "", "get", "clusterrole", role)
	}
	// The admin identity is a cluster admin through system:masters.
	if out := shared.mustKubectl(t, "", "auth", "can-i", "*", "*"); strings.TrimSpace(out) != "yes" {
		t.Errorf("admin cannot do everything: %q", out)
	}
}

func TestConfigMapLifecycleWithKubectl(t *testing.T) {
	m := shared
	m.mustKubectl(t, "", "create", "namespace", "cm-lifecycle")
	m.mustKubectl(t, "", "-n", "cm-lifecycle", "create", "configmap", "settings", "--from-literal=color=blue")

	var cm corev1.ConfigMap
	if err := json.Unmarshal([]byte(m.mustKubectl(t, "", "-n", "cm-lifecycle", "get", "configmap", "settings", "-o", "json")), &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["color"] != "blue" {
		t.Fatalf("data = %v, want color=blue", cm.Data)
	}

	m.mustKubectl(t, "", "-n", "cm-lifecycle", "patch", "configmap", "settings", "--type=merge", "-p", `{"data":{"color":"green","size":"L"}}`)
	got, err := m.kube(t).CoreV1().ConfigMaps("cm-lifecycle").Get(context.Background(), "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["color"] != "green" || got.Data["size"] != "L" {
		t.Fatalf("after patch data = %v", got.Data)
	}
	if got.ResourceVersion == cm.ResourceVersion {
		t.Fatalf("patch did not change the resourceVersion %s", got.ResourceVersion)
	}

	if out := m.mustKubectl(t, "", "-n", "cm-lifecycle", "get", "configmaps", "-o", "name"); !strings.Contains(out, "configmap/settings") {
		t.Fatalf("list does not show the configmap: %q", out)
	}
	m.mustKubectl(t, "", "-n", "cm-lifecycle", "delete", "configmap", "settings")
	r := m.kubectl(t, "", "-n", "cm-lifecycle", "get", "configmap", "settings")
	if r.err == nil || !strings.Contains(r.stderr, `configmaps "settings" not found`) {
		t.Fatalf("get after delete: err=%v stderr=%q", r.err, r.stderr)
	}
	// A namespace that does not exist refuses new objects (NamespaceLifecycle admission).
	_, err = m.kube(t).CoreV1().ConfigMaps("no-such-namespace").Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("create in a missing namespace: %v, want NotFound", err)
	}
}

func TestOrganizationLifecycleWithKubectl(t *testing.T) {
	m := shared
	m.mustKubectl(t, `
apiVersion: resourcemanager.miloapis.com/v1alpha1
kind: Organization
metadata:
  name: lifecycle-org
`, "apply", "-f", "-")

	org, err := m.dynamic(t).Resource(organizations).Get(context.Background(), "lifecycle-org", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if typ, _, _ := unstructured.NestedString(org.Object, "spec", "type"); typ != "Standard" {
		t.Fatalf("spec.type defaulted to %q, want Standard", typ)
	}

	m.mustKubectl(t, "", "label", "organization", "lifecycle-org", "tier=gold")
	if out := m.mustKubectl(t, "", "get", "organizations", "-l", "tier=gold", "-o", "name"); strings.TrimSpace(out) != "organization.resourcemanager.miloapis.com/lifecycle-org" {
		t.Fatalf("label selector list = %q", out)
	}
	if out := m.mustKubectl(t, "", "get", "organization", "lifecycle-org"); !strings.Contains(out, "Standard") {
		t.Fatalf("printer columns do not show the type:\n%s", out)
	}
	m.mustKubectl(t, "", "delete", "organization", "lifecycle-org")
	if _, err := m.dynamic(t).Resource(organizations).Get(context.Background(), "lifecycle-org", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want NotFound", err)
	}
}

func TestSchemaValidationRejectsBadObjects(t *testing.T) {
	m := shared
	orgs := m.dynamic(t).Resource(organizations)
	ctx := context.Background()

	cases := []struct {
		name      string
		obj       map[string]any
		wantField string
	}{
		{"unknown enum value", map[string]any{"metadata": map[string]any{"name": "weird"}, "spec": map[string]any{"type": "Weird"}}, "spec.type"},
		{"name not a DNS label", map[string]any{"metadata": map[string]any{"name": "Not.A.Label"}}, ""},
		{"name too long for its namespace", map[string]any{"metadata": map[string]any{"name": strings.Repeat("a", 51)}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: tc.obj}
			obj.SetAPIVersion("resourcemanager.miloapis.com/v1alpha1")
			obj.SetKind("Organization")
			_, err := orgs.Create(ctx, obj, metav1.CreateOptions{})
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Code != 422 {
				t.Fatalf("create: %v, want a 422 Status", err)
			}
			if tc.wantField != "" && !hasCause(status.Status(), tc.wantField) {
				t.Fatalf("422 does not name field %s: %+v", tc.wantField, status.Status().Details)
			}
			if _, err := orgs.Get(ctx, obj.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a rejected object was stored: %v", err)
			}
		})
	}

	t.Run("kubectl shows the field", func(t *testing.T) {
		r := m.kubectl(t, "apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Organization\nmetadata: {name: weird}\nspec: {type: Weird}\n", "apply", "-f", "-")
		if r.err == nil || !strings.Contains(r.stderr, `spec.type: Unsupported value: "Weird"`) {
			t.Fatalf("kubectl apply of a bad type: err=%v stderr=%q", r.err, r.stderr)
		}
	})

	t.Run("type is immutable", func(t *testing.T) {
		m.mustKubectl(t, "apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Organization\nmetadata: {name: immutable-type}\nspec: {type: Personal}\n", "apply", "-f", "-")
		t.Cleanup(func() { orgs.Delete(ctx, "immutable-type", metav1.DeleteOptions{}) }) //nolint:errcheck
		r := m.kubectl(t, "", "patch", "organization", "immutable-type", "--type=merge", "-p", `{"spec":{"type":"Standard"}}`)
		if r.err == nil || !strings.Contains(r.stderr, "type is immutable") {
			t.Fatalf("changing spec.type: err=%v stderr=%q", r.err, r.stderr)
		}
	})

	t.Run("policy binding needs exactly one selector", func(t *testing.T) {
		r := m.kubectl(t, `
apiVersion: iam.miloapis.com/v1alpha1
kind: PolicyBinding
metadata: {name: both, namespace: default}
spec:
  roleRef: {name: viewer, namespace: milo-system}
  subjects: [{kind: User, name: alice}]
  resourceSelector:
    resourceRef: {apiGroup: resourcemanager.miloapis.com, kind: Project, name: web}
    resourceKind: {apiGroup: resourcemanager.miloapis.com, kind: Project}
`, "apply", "-f", "-")
		if r.err == nil || !strings.Contains(r.stderr, "exactly one of resourceRef or resourceKind") {
			t.Fatalf("binding with two selectors: err=%v stderr=%q", r.err, r.stderr)
		}
	})
}

func hasCause(s metav1.Status, field string) bool {
	if s.Details == nil {
		return false
	}
	for _, c := range s.Details.Causes {
		if c.Field == field {
			return true
		}
	}
	return false
}

func TestRestartKeepsDataAndSIGTERMExitsZero(t *testing.T) {
	dataDir := t.TempDir()
	// This server also writes an audit log, to check requests name their project.
	policy := filepath.Join(dataDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dataDir, "audit.log")
	first, err := startMilo(dataDir, "--audit-policy-file", policy, "--audit-log-path", auditLog, "--project-crds")
	if err != nil {
		t.Fatal(err)
	}
	first.stopOnCleanup(t)
	first.mustKubectl(t, "", "create", "namespace", "keep")
	first.mustKubectl(t, "", "-n", "keep", "create", "configmap", "survivor", "--from-literal=k=v")
	first.mustKubectl(t, "apiVersion: resourcemanager.miloapis.com/v1alpha1\nkind: Organization\nmetadata: {name: durable}\n", "apply", "-f", "-")

	// The same namespace and names in the platform and in two projects: the watch
	// cache must keep them apart when it is refilled from etcd after the restart.
	if err := first.ensureOrganization("acme"); err != nil {
		t.Fatal(err)
	}
	// Every project of acme counts against a grant of 6, and again, once
	// each, after the restart.
	eventually(t, "acme's namespace", func() error {
		_, err := first.kube(t).CoreV1().Namespaces().Get(context.Background(), "organization-acme", metav1.GetOptions{})
		return err
	})
	if _, err := first.dynamic(t).Resource(grantsGVR).Namespace("organization-acme").Create(context.Background(), quotaObject("ResourceGrant", "organization-acme", "projects",
		grantSpec("Organization", "acme", "resourcemanager.miloapis.com/projects", 6)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conditionIs(t, first.dynamic(t).Resource(grantsGVR).Namespace("organization-acme"), "projects", "Active")
	for _, p := range []string{"restart-a", "restart-b"} {
		first.createProject(t, p)
		c := first.projectKube(t, p)
		createNamespace(t, c, "keep")
		createConfigMap(t, c, "keep", "survivor", map[string]string{"k": p}, nil)
	}

	// A project's own kind, and an instance of it, served again after the restart.
	if _, err := crdsAt(t, first.projectConfig(t, "restart-a")).Create(context.Background(), projectCRD("things", "Thing", apiextensionsv1.NamespaceScoped, "integer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, crdsAt(t, first.projectConfig(t, "restart-a")), "things.crd.example.net", apiextensionsv1.ConditionTrue)
	restartThings := schema.GroupVersionResource{Group: "crd.example.net", Version: "v1", Resource: "things"}
	eventually(t, "a Thing in project restart-a", func() error {
		_, err := first.projectDynamic(t, "restart-a").Resource(restartThings).Namespace("keep").Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "crd.example.net/v1", "kind": "Thing", "metadata": map[string]any{"name": "survivor"}, "spec": map[string]any{"size": int64(5)}}}, metav1.CreateOptions{})
		return err
	})

	// A project deletion waiting on a finalizer when the server stops.
	doomed := first.newProject(t, "restart-doomed")
	if _, err := first.projectKube(t, doomed).CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := first.dynamic(t).Resource(projectsGVR).Delete(context.Background(), doomed, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deletion waits for the finalizer", func() error {
		if status, msg, _ := projectCondition(t, first, doomed, "ResourceCleanup"); status != "True" || !strings.Contains(msg, "default/held") {
			return fmt.Errorf("ResourceCleanup %s %q", status, msg)
		}
		return nil
	})

	// Denied requests carry their project too.
	if _, err := first.as(t, "", tenancy.ProjectPath("restart-a")).CoreV1().Secrets("keep").List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("anonymous list: %v", err)
	}

	// A namespace deletion and a foreground cascading deletion, both waiting
	// on finalizers when the server stops.
	mid := first.newProject(t, "restart-mid")
	mc := first.projectKube(t, mid)
	createNamespace(t, mc, "going")
	hold := []string{"example.com/hold"}
	if _, err := mc.CoreV1().ConfigMaps("going").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: hold}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mc.CoreV1().Namespaces().Delete(context.Background(), "going", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	owner, err := mc.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fg-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	block := true
	if _, err := mc.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fg-dependent", Finalizers: hold,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: &block}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	foreground := metav1.DeletePropagationForeground
	if err := mc.CoreV1().ConfigMaps("default").Delete(context.Background(), "fg-owner", metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both deletions waiting", func() error {
		ns, err := mc.CoreV1().Namespaces().Get(context.Background(), "going", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := namespaceCondition(ns, corev1.NamespaceFinalizersRemaining); c != corev1.ConditionTrue {
			return fmt.Errorf("namespace conditions %v", ns.Status.Conditions)
		}
		dep, err := mc.CoreV1().ConfigMaps("default").Get(context.Background(), "fg-dependent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if dep.DeletionTimestamp == nil {
			return fmt.Errorf("the dependent is not being deleted yet")
		}
		return nil
	})

	buckets := func(m *milo) dynamic.ResourceInterface {
		return m.dynamic(t).Resource(bucketsGVR).Namespace("organization-acme")
	}
	bucketIs(t, buckets(first), "acme", "resourcemanager.miloapis.com/projects", 6, 4)
	// What restart-a stores is metered for its objects and bytes quotas,
	// and read again from etcd after the restart.
	for _, rt := range []string{"objects", "bytes"} {
		if _, err := first.dynamic(t).Resource(grantsGVR).Namespace("organization-acme").Create(context.Background(), quotaObject("ResourceGrant", "organization-acme", "restart-a-"+rt,
			grantSpec("Project", "restart-a", "storage.miloapis.com/"+rt, 1<<40)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	objectsBefore := objectsBucketMatches(t, first, buckets(first), "restart-a", 1<<40)
	var bytesBefore int64
	eventually(t, "restart-a's bytes bucket", func() error {
		a, _, err := bucketNumbers(buckets(first), "restart-a", "storage.miloapis.com/bytes")
		if err == nil && a == 0 {
			err = fmt.Errorf("nothing counted")
		}
		bytesBefore = a
		return err
	})

	leaseBefore, err := first.kube(t).CoordinationV1().Leases("milo-system").Get(context.Background(), "milo-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := first.stop(); err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d, %v\n%s", code, err, first.logTail())
	}

	audited, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied bool
	for _, line := range strings.Split(string(audited), "\n") {
		if !strings.Contains(line, `"tenancy.miloapis.com/project":"restart-a"`) || !strings.Contains(line, `"stage":"ResponseComplete"`) {
			continue
		}
		allowed = allowed || strings.Contains(line, `"resource":"configmaps"`) && strings.Contains(line, `"code":201`)
		denied = denied || strings.Contains(line, `"resource":"secrets"`) && strings.Contains(line, `"code":403`)
	}
	if !allowed || !denied {
		t.Fatalf("audit log lacks project-annotated events (allowed %v, denied %v)", allowed, denied)
	}

	second, err := startMilo(dataDir, "--project-crds")
	if err != nil {
		t.Fatal(err)
	}
	second.stopOnCleanup(t)
	// Milo's definitions are stored as this binary wants them: the restart
	// compares and writes none (a write would wait for admission to be
	// ready, holding up the informers that need the definitions).
	installed := ""
	for _, line := range strings.Split(second.Logs.String(), "\n") {
		if strings.Contains(line, `"Milo CRDs are established"`) {
			installed = line
		}
	}
	if !strings.HasSuffix(installed, " written=0") {
		t.Errorf("the restarted server wrote Milo's CRDs again: %q", installed)
	}
	if got, err := second.projectDynamic(t, "restart-a").Resource(restartThings).Namespace("keep").Get(context.Background(), "survivor", metav1.GetOptions{}); err != nil {
		t.Errorf("project restart-a's own kind after the restart: %v", err)
	} else if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 5 {
		t.Errorf("project restart-a's Thing after the restart: %v", got.Object)
	}
	if out := second.mustKubectl(t, "", "-n", "keep", "get", "configmap", "survivor", "-o", "jsonpath={.data.k}"); out != "v" {
		t.Fatalf("configmap after restart: %q", out)
	}
	second.mustKubectl(t, "", "get", "organization", "durable")
	// The restarted server's controllers are the same lease holder (their
	// identity is kept in the data directory): they lead again without
	// waiting for the old lease to expire, and no transition is counted.
	eventually(t, "the restarted controllers lead", func() error {
		if !strings.Contains(second.Logs.String(), "Leading") {
			return fmt.Errorf("not leading yet")
		}
		return nil
	})
	leaseAfter, err := second.kube(t).CoordinationV1().Leases("milo-system").Get(context.Background(), "milo-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *leaseAfter.Spec.HolderIdentity != *leaseBefore.Spec.HolderIdentity || *leaseAfter.Spec.LeaseTransitions != *leaseBefore.Spec.LeaseTransitions {
		t.Fatalf("lease after restart held by %s (%d transitions), before by %s (%d)", *leaseAfter.Spec.HolderIdentity, *leaseAfter.Spec.LeaseTransitions,
			*leaseBefore.Spec.HolderIdentity, *leaseBefore.Spec.LeaseTransitions)
	}
	// The deletion resumes after the restart and finishes once the finalizer goes.
	if _, err := second.projectKube(t, doomed).CoreV1().ConfigMaps("default").Patch(context.Background(), "held",
		types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deletion finishes after the restart", func() error {
		if _, _, exists := projectCondition(t, second, doomed, "Ready"); exists {
			return fmt.Errorf("project %s still exists", doomed)
		}
		return nil
	})
	// Both waiting deletions finish after the restart once their finalizers go.
	mc = second.projectKube(t, mid)
	for _, held := range [][2]string{{"going", "held"}, {"default", "fg-dependent"}} {
		if _, err := mc.CoreV1().ConfigMaps(held[0]).Patch(context.Background(), held[1], types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the namespace and the foreground owner gone after the restart", func() error {
		if _, err := mc.CoreV1().Namespaces().Get(context.Background(), "going", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace going: %v", err)
		}
		if _, err := mc.CoreV1().ConfigMaps("default").Get(context.Background(), "fg-owner", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("fg-owner: %v", err)
		}
		return nil
	})
	for _, p := range []string{"restart-a", "restart-b"} {
		for _, rv := range []string{"0", ""} {
			list, err := second.projectKube(t, p).CoreV1().ConfigMaps("").List(context.Background(), metav1.ListOptions{ResourceVersion: rv})
			if err != nil || len(ownConfigMaps(list.Items)) != 1 || ownConfigMaps(list.Items)[0].Data["k"] != p {
				t.Fatalf("%s after restart (rv %q): %v %v", p, rv, list, err)
			}
		}
	}
	if list, err := second.kube(t).CoreV1().ConfigMaps("keep").List(context.Background(), metav1.ListOptions{ResourceVersion: "0"}); err != nil || len(ownConfigMaps(list.Items)) != 1 || ownConfigMaps(list.Items)[0].Data["k"] != "v" {
		t.Fatalf("platform configmaps after restart: %v %v", list, err)
	}
	// The quota ledger is refilled from what is stored, each project
	// counted once: with restart-doomed gone, 3 of 6 are used, so 3 more
	// projects fit and the fourth does not.
	bucketIs(t, buckets(second), "acme", "resourcemanager.miloapis.com/projects", 6, 3)
	// restart-a's objects and bytes are read again, not counted from zero
	// nor twice: one more ConfigMap is one more object on top of them all.
	createConfigMap(t, second.projectKube(t, "restart-a"), "keep", "after-restart", nil, nil)
	if got := objectsBucketMatches(t, second, buckets(second), "restart-a", 1<<40); got != objectsBefore+1 {
		t.Fatalf("restart-a stores %d objects after the restart and one create, %d before", got, objectsBefore)
	}
	eventually(t, "restart-a's bytes after the restart and a small ConfigMap", func() error {
		if a, _, err := bucketNumbers(buckets(second), "restart-a", "storage.miloapis.com/bytes"); err != nil || a <= bytesBefore || a > bytesBefore+1000 {
			return fmt.Errorf("%d bytes (before %d), %v", a, bytesBefore, err)
		}
		return nil
	})
	for i := range 4 {
		err := second.tryCreateProject(t, fmt.Sprintf("restart-q%d", i))
		if (i < 3) != (err == nil) || (err != nil && !apierrors.IsForbidden(errors.Unwrap(err))) {
			t.Fatalf("project %d after the restart, 3 units left: %v", i, err)
		}
	}
	// The generated CA is reused, so kubeconfigs handed out before the restart keep working.
	if out := second.mustKubectl(t, "", "get", "namespace", "keep", "-o", "name"); strings.TrimSpace(out) != "namespace/keep" {
		t.Fatalf("namespace after restart: %q", out)
	}
}

// runMilo runs the binary to completion and returns its exit code and stderr.
func runMilo(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(miloBin, args...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func TestStartRefusesBadInputWithOneClearLine(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)

	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args func(dataDir string) []string
		want string
	}{
		{"unknown flag", func(d string) []string { return []string{"start", "--data-dir", d, "--no-such-flag"} }, "unknown flag: --no-such-flag"},
		{"bad flag value", func(d string) []string { return []string{"start", "--data-dir", d, "--secure-port", "many"} }, `invalid argument "many"`},
		{"port out of range", func(d string) []string { return []string{"start", "--data-dir", d, "--secure-port", "70000"} }, "--secure-port 70000 must be between 0 and 65535"},
		{"port in use", func(d string) []string { return []string{"start", "--data-dir", d, "--secure-port", busyPort} }, "address already in use"},
		{"data dir is a file", func(string) []string { return []string{"start", "--data-dir", notADir, "--secure-port", "0"} }, "is not a directory"},
		{"unexpected argument", func(d string) []string { return []string{"start", "--data-dir", d, "extra"} }, `unknown command "extra"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			code, out := runMilo(t, tc.args(dataDir)...)
			if code == 0 {
				t.Fatalf("exit 0, want an error; output:\n%s", out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "milo: ") || !strings.Contains(last, tc.want) {
				t.Fatalf("last line %q does not explain %q; output:\n%s", last, tc.want, out)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Fatalf("a failed start left the data directory behind (stat: %v)", err)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out := runMilo(t, "version")
	if code != 0 || !strings.HasPrefix(out, "milo ") || !strings.Contains(out, "kubernetes v1.36") {
		t.Fatalf("milo version: exit %d, %q", code, out)
	}

	// The server answers the Kubernetes version it serves, as a semantic version
	// kubectl parses, with Milo's version as build metadata; in a project too.
	m := shared
	project := m.newProject(t, "version")
	for _, c := range []kubernetes.Interface{m.kube(t), m.projectKube(t, project)} {
		info, err := c.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		v, err := utilversion.ParseSemantic(info.GitVersion)
		if err != nil || v.Major() != 1 || v.Minor() != 36 || !strings.HasPrefix(v.BuildMetadata(), "milo-") {
			t.Fatalf("/version gitVersion %q: %v", info.GitVersion, err)
		}
		if info.Major != "1" || info.Minor != "36" || strings.Contains(info.GitCommit, "$Format") {
			t.Fatalf("/version: %+v", info)
		}
	}
	r := m.kubectl(t, "", "version", "-o", "json")
	if r.err != nil || strings.Contains(r.stderr, "could not parse") || !strings.Contains(r.stdout, `"serverVersion"`) {
		t.Fatalf("kubectl version: %v\n%s\n%s", r.err, r.stdout, r.stderr)
	}
}
