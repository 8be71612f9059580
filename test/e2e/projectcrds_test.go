package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"go.miloapis.com/milo/pkg/projectcrds"
	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

// sharedConversionPrefix is the one conversion webhook URL prefix the shared
// server allows project CRDs.
const sharedConversionPrefix = "https://convert.example.net/"

// The project CRD tests share a server of their own, with the shared
// server's flags: the handlers and admission instances their schemas leave
// behind would otherwise be counted by the shared server's measurement of
// what projects cost (TestThousandProjectsCostNoGoroutinesOrWatches).
var (
	crdServerOnce sync.Once
	crdShared     *milo
	crdServerDir  string
	crdServerErr  error
)

func crdServer(t *testing.T) *milo {
	t.Helper()
	crdServerOnce.Do(func() {
		if crdServerDir, crdServerErr = os.MkdirTemp("", "milo-e2e-crds-"); crdServerErr != nil {
			return
		}
		if crdShared, crdServerErr = startMilo(crdServerDir, sharedArgs...); crdServerErr == nil {
			crdServerErr = crdShared.ensureOrganization("acme")
		}
	})
	if crdServerErr != nil {
		t.Fatalf("starting the project CRDs' server: %v", crdServerErr)
	}
	return crdShared
}

// stopCRDServer stops the project CRDs' server, if a test started it.
func stopCRDServer() (int, error) {
	if crdShared == nil {
		return 0, nil
	}
	defer os.RemoveAll(crdServerDir)
	return crdShared.stop()
}

func crdsAt(t testing.TB, cfg *rest.Config) apiextensionsclient.CustomResourceDefinitionInterface {
	t.Helper()
	c, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.CustomResourceDefinitions()
}

// projectCRD is a CRD of group crd.example.net; size is the type of
// spec.size, so that two projects' CRDs of one name differ in schema.
func projectCRD(plural, kind string, scope apiextensionsv1.ResourceScope, sizeType string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".crd.example.net"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "crd.example.net", Scope: scope,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.TrimSuffix(plural, "s"), Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: sizeType}}}}}}}},
		},
	}
}

// waitNames waits until the CRD's NamesAccepted condition has status want and
// returns the CRD.
func waitNames(t *testing.T, c apiextensionsclient.CustomResourceDefinitionInterface, name string, want apiextensionsv1.ConditionStatus) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crd *apiextensionsv1.CustomResourceDefinition
	eventually(t, "NamesAccepted="+string(want)+" of "+name, func() error {
		var err error
		if crd, err = c.Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			return err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.NamesAccepted && cond.Status == want {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", crd.Status.Conditions)
	})
	return crd
}

func condition(crd *apiextensionsv1.CustomResourceDefinition, typ apiextensionsv1.CustomResourceDefinitionConditionType) apiextensionsv1.CustomResourceDefinitionCondition {
	for _, c := range crd.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return apiextensionsv1.CustomResourceDefinitionCondition{}
}

// TestProjectCRDsAreTheProjectsOwn: a project defines CRDs with kubectl; they
// get their names accepted with upstream's conditions, compete for names only
// with the project's own CRDs and what the platform serves; another project,
// an organization context, the platform and an outsider see none of them;
// another project defines the same name with another schema; deleting one
// touches no other project's; a project created again under a deleted one's
// name starts without them.
func TestProjectCRDsAreTheProjectsOwn(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	a, b := m.newProject(t, "crds-a"), m.newProject(t, "crds-b")
	inA, inB := crdsAt(t, m.projectConfig(t, a)), crdsAt(t, m.projectConfig(t, b))

	// B watches its CRDs from before A defines any: nothing of A's may arrive.
	bWatch, err := inB.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bWatch.Stop()

	// kubectl apply in A, as a project's user does.
	manifest := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.crd.example.net}
spec:
  group: crd.example.net
  names: {kind: Thing, plural: things, singular: thing, shortNames: [th]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, default: 1}
            x-kubernetes-validations:
            - {rule: "self.size >= 0", message: "size is not negative"}
`
	if r := m.kubectlWith(t, m.projectKubeconfig(t, a), manifest, "apply", "-f", "-"); r.err != nil {
		t.Fatalf("kubectl apply of a CRD in project %s: %v %s", a, r.err, r.stderr)
	}
	things := waitNames(t, inA, "things.crd.example.net", apiextensionsv1.ConditionTrue)
	if things.Status.AcceptedNames.Kind != "Thing" || things.Status.AcceptedNames.ShortNames[0] != "th" {
		t.Errorf("accepted names %+v", things.Status.AcceptedNames)
	}
	if c := condition(things, apiextensionsv1.NamesAccepted); c.Reason != "NoConflicts" {
		t.Errorf("NamesAccepted %+v, want upstream's reason NoConflicts", c)
	}
	if c := condition(things, apiextensionsv1.Established); c.Status != apiextensionsv1.ConditionTrue || c.Reason != "InitialNamesAccepted" {
		t.Errorf("Established %+v, want upstream's True, InitialNamesAccepted", c)
	}

	// B defines the same name, cluster-scoped, with another schema: its own.
	if _, err := inB.Create(ctx, projectCRD("things", "Thing", apiextensionsv1.ClusterScoped, "string"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the same CRD name in project %s: %v", b, err)
	}
	waitNames(t, inB, "things.crd.example.net", apiextensionsv1.ConditionTrue)
	if got, err := inA.Get(ctx, "things.crd.example.net", metav1.GetOptions{}); err != nil || got.Spec.Scope != apiextensionsv1.NamespaceScoped ||
		got.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["size"].Type != "integer" {
		t.Fatalf("project %s's CRD after %s defined its own: %v %+v", a, b, err, got)
	}

	// The platform cannot define a CRD in a group projects use.
	platformThings := projectCRD("platformthings", "PlatformThing", apiextensionsv1.NamespaceScoped, "integer")
	if _, err := crdsAt(t, m.restConfig(t)).Create(ctx, platformThings, metav1.CreateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("a platform CRD in a group projects define: %v, want 409", err)
	}

	// Names compete within a project's group: a second kind Thing in A is refused its names.
	if _, err := inA.Create(ctx, projectCRD("others", "Thing", apiextensionsv1.NamespaceScoped, "integer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	others := waitNames(t, inA, "others.crd.example.net", apiextensionsv1.ConditionFalse)
	// Upstream's reason names the last conflict found: kind, then list kind.
	if c := condition(others, apiextensionsv1.NamesAccepted); c.Reason != "ListKindConflict" || !strings.Contains(c.Message, `"Thing" is already in use`) {
		t.Errorf("NamesAccepted of a second kind Thing: %+v", c)
	}
	// ... and with what the platform serves in the project.
	platformCRDs := crdsAt(t, m.restConfig(t))
	platformKind := projectCRD("platformkinds", "PlatformKind", apiextensionsv1.NamespaceScoped, "integer")
	platformKind.Name, platformKind.Spec.Group = "platformkinds.platform.crd.example.org", "platform.crd.example.org"
	if _, err := platformCRDs.Create(ctx, platformKind, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	m.waitEstablished(t, "crd/"+platformKind.Name)
	// A project CRD the lifecycle controller names before its informer has
	// seen the platform's group keeps its names (the group was not the
	// platform's yet, as far as it knew): probe until one is refused, so
	// the controller has seen it (on SQL storage, watches lag by up to a
	// second: kine polls its table).
	eventually(t, "the lifecycle controller sees the platform's group", func() error {
		probe := projectCRD("probes", "Probe", apiextensionsv1.NamespaceScoped, "integer")
		probe.Name, probe.Spec.Group = "probes."+platformKind.Spec.Group, platformKind.Spec.Group
		if _, err := inA.Create(ctx, probe, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		var accepted apiextensionsv1.ConditionStatus
		if err := framework.Eventually(30*time.Second, func() error {
			got, err := inA.Get(ctx, probe.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if accepted = condition(got, apiextensionsv1.NamesAccepted).Status; accepted == "" {
				return fmt.Errorf("no NamesAccepted yet")
			}
			return nil
		}); err != nil {
			return err
		}
		if err := inA.Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if err := framework.Eventually(30*time.Second, func() error {
			if _, err := inA.Get(ctx, probe.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the probe is still there: %v", err)
			}
			return nil
		}); err != nil {
			return err
		}
		if accepted != apiextensionsv1.ConditionFalse {
			return fmt.Errorf("a probe in the platform's group had its names accepted")
		}
		return nil
	})
	shadow := projectCRD("platformkinds", "Shadow", apiextensionsv1.NamespaceScoped, "integer")
	shadow.Name, shadow.Spec.Group = platformKind.Name, platformKind.Spec.Group
	if _, err := inA.Create(ctx, shadow, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := condition(waitNames(t, inA, shadow.Name, apiextensionsv1.ConditionFalse), apiextensionsv1.NamesAccepted); c.Reason != "GroupConflict" {
		t.Errorf("a project CRD shadowing the platform's: %+v", c)
	}
	// A group is the platform's or projects': a new kind in a built-in group is refused too.
	inApps := projectCRD("gizmos", "Gizmo", apiextensionsv1.NamespaceScoped, "integer")
	inApps.Name, inApps.Spec.Group = "gizmos.rbac.authorization.k8s.io", "rbac.authorization.k8s.io"
	inApps.Annotations = map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/1111"}
	if _, err := inB.Create(ctx, inApps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := condition(waitNames(t, inB, inApps.Name, apiextensionsv1.ConditionFalse), apiextensionsv1.NamesAccepted); c.Reason != "GroupConflict" {
		t.Errorf("a project CRD in a built-in group: %+v", c)
	}
	// The names a deleted CRD held go to the next that asks.
	if err := inA.Delete(ctx, "things.crd.example.net", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, inA, "others.crd.example.net", apiextensionsv1.ConditionTrue)
	if _, err := inB.Get(ctx, "things.crd.example.net", metav1.GetOptions{}); err != nil {
		t.Fatalf("project %s's CRD after %s deleted its own of the same name: %v", b, a, err)
	}

	// Nobody else sees A's CRDs: B (get, list, watch), the platform, the organization's context.
	if _, err := inB.Get(ctx, "others.crd.example.net", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("project %s gets project %s's CRD: %v", b, a, err)
	}
	// A's CRDs by name; "things" is A's when namespaced (B's is cluster-scoped).
	ofA := func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		return crd.Name == "others.crd.example.net" || crd.Name == shadow.Name ||
			(crd.Name == "things.crd.example.net" && crd.Spec.Scope == apiextensionsv1.NamespaceScoped)
	}
	list, err := inB.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Errorf("project %s lists %v, %d CRDs; want its own two", b, err, len(list.Items))
	}
	for i := range list.Items {
		if ofA(&list.Items[i]) {
			t.Errorf("project %s lists project %s's CRD %s", b, a, list.Items[i].Name)
		}
	}
	if list, err := platformCRDs.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=others.crd.example.net"}); err != nil || len(list.Items) != 0 {
		t.Errorf("the platform lists a project's CRD: %v %v", err, list)
	}
	if _, err := crdsAt(t, m.configAt(t, tenancy.OrganizationPath("acme"))).Get(ctx, "others.crd.example.net", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the organization's context gets a project's CRD: %v", err)
	}
	// Only B's own event: A's CRDs never reach B's watch.
	marker := projectCRD("markers", "Marker", apiextensionsv1.NamespaceScoped, "integer")
	if _, err := inB.Create(ctx, marker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(time.Minute)
	for seenMarker := false; !seenMarker; {
		select {
		case ev, ok := <-bWatch.ResultChan():
			if !ok {
				t.Fatal("project B's watch ended")
			}
			crd, isCRD := ev.Object.(*apiextensionsv1.CustomResourceDefinition)
			if !isCRD || ev.Type == watch.Error {
				t.Fatalf("project B's watch: %v %#v", ev.Type, ev.Object)
			}
			if ofA(crd) {
				t.Fatalf("project B's watch delivered project A's CRD %s", crd.Name)
			}
			seenMarker = crd.Name == marker.Name
		case <-timeout:
			t.Fatal("project B's watch did not deliver its own CRD")
		}
	}

	// The all-projects view lists both projects' CRDs, each with its project.
	all, err := crdsAt(t, m.configAt(t, tenancy.AllProjectsPath)).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byProject := map[string][]string{}
	for _, crd := range all.Items {
		p := crd.Annotations[tenancy.AnnotationKey]
		byProject[p] = append(byProject[p], crd.Name)
	}
	if len(byProject[a]) != 2 || len(byProject[b]) != 3 || len(byProject[""]) != 0 {
		t.Errorf("the all-projects view: %v", byProject)
	}

	// An outsider cannot tell A from a project that does not exist.
	outsider := func(p string) error {
		cfg := rest.AnonymousClientConfig(m.projectConfig(t, p))
		cfg.BearerToken = "carol-token"
		_, err := crdsAt(t, cfg).List(ctx, metav1.ListOptions{})
		return err
	}
	errA, errMissing := outsider(a), outsider("crds-missing-project")
	if !apierrors.IsForbidden(errA) || !apierrors.IsForbidden(errMissing) ||
		strings.ReplaceAll(errA.Error(), a, "P") != strings.ReplaceAll(errMissing.Error(), "crds-missing-project", "P") {
		t.Errorf("an outsider's list of CRDs: in %s %v; in a missing project %v", a, errA, errMissing)
	}

	// A project created again under A's name starts without A's CRDs.
	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, a, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "project "+a+" gone", func() error {
		if _, err := m.dynamic(t).Resource(projectsGVR).Get(ctx, a, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	m.createProject(t, a)
	m.waitProjectReady(t, a)
	if list, err := inA.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("the new project %s lists %v %v, want no CRDs", a, err, list)
	}
	eventually(t, "the deleted project's CRDs purged", func() error {
		all, err := crdsAt(t, m.configAt(t, tenancy.AllProjectsPath)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, crd := range all.Items {
			if crd.Annotations[tenancy.AnnotationKey] == a {
				return fmt.Errorf("%s of project %s is still stored", crd.Name, a)
			}
		}
		return nil
	})
}

// TestProjectCRDInstancesHoldTheirProjectsDeletion: a deleted project's
// instances of its own kinds are deleted through its API like any object, so
// one held by a finalizer holds the project until it is released.
func TestProjectCRDInstancesHoldTheirProjectsDeletion(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	p := m.newProject(t, "crd-doomed")
	crds, kinds := definedKind(t, m, p, "holders", "Holder")
	held := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/v1", "kind": "Holder",
		"metadata": map[string]any{"name": "held", "finalizers": []any{"example.com/hold"}}, "spec": map[string]any{"size": int64(1)}}}
	if _, err := kinds.Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	plain := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/v1", "kind": "Holder",
		"metadata": map[string]any{"name": "plain"}, "spec": map[string]any{"size": int64(2)}}}
	if _, err := kinds.Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cleanup reports the instance it waits for", func() error {
		status, msg, exists := projectCondition(t, m, p, "ResourceCleanup")
		if status != "True" || !strings.Contains(msg, "holders default/held") {
			_, heldErr := kinds.Get(ctx, "held", metav1.GetOptions{})
			return fmt.Errorf("ResourceCleanup %s %q (project exists: %v; the held instance: %v)", status, msg, exists, heldErr)
		}
		return nil
	})
	if _, err := kinds.Get(ctx, "plain", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("an instance without finalizers survived: %v", err)
	}
	// The kind's definition stays while an instance waits: without it the
	// instance could no longer be listed, nor its finalizer waited for.
	crd, err := crds.Get(ctx, "holders.crd.example.net", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the CRD of a held instance: %v", err)
	}
	if crd.DeletionTimestamp != nil {
		t.Fatalf("the CRD of a held instance is being deleted (at %v)", crd.DeletionTimestamp)
	}
	if _, err := kinds.Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "project "+p+" gone", func() error {
		if _, err := m.dynamic(t).Resource(projectsGVR).Get(ctx, p, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
}

// TestProjectCRDsAdmission: what a project may not define is refused with 422
// and a message that says why; a project member needs the permission for
// CRDs in the project.
func TestProjectCRDsAdmission(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	p := m.newProject(t, "crds-admission")
	crds := crdsAt(t, m.projectConfig(t, p))

	for group, message := range map[string]string{"example.k8s.io": "approval", "widgets.kubernetes.io": "approval", "projects.miloapis.com": "reserved"} {
		reserved := projectCRD("things", "Thing", apiextensionsv1.NamespaceScoped, "integer")
		reserved.Name, reserved.Spec.Group = "things."+group, group
		if _, err := crds.Create(ctx, reserved, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), message) {
			t.Errorf("a CRD in group %s: %v, want 422 about %s", group, err, message)
		}
	}
	// With upstream's approval annotation, a project installs a community CRD.
	approved := projectCRD("gateways", "Gateway", apiextensionsv1.NamespaceScoped, "integer")
	approved.Name, approved.Spec.Group = "gateways.gateway.networking.k8s.io", "gateway.networking.k8s.io"
	approved.Annotations = map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api/pull/891"}
	if _, err := crds.Create(ctx, approved, metav1.CreateOptions{}); err != nil {
		t.Errorf("Gateway API's CRD in a project: %v", err)
	}
	withWebhook := func(url string) *apiextensionsv1.CustomResourceDefinition {
		crd := projectCRD("converted", "Converted", apiextensionsv1.NamespaceScoped, "integer")
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"}, ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: &url}}}
		return crd
	}
	if _, err := crds.Create(ctx, withWebhook("https://attacker.example.org/convert"), metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "conversion webhook") {
		t.Errorf("a conversion webhook the operator did not allow: %v, want 422", err)
	}
	if _, err := crds.Create(ctx, withWebhook(sharedConversionPrefix+"converted"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a conversion webhook the operator allows: %v", err)
	}

	// A member who may only read the project cannot define kinds in it.
	admin := m.projectKube(t, p)
	createServiceAccount(t, admin, "default", "reader")
	bindServiceAccount(t, admin, "", "view", "default", "reader")
	token, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "reader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(m.projectConfig(t, p))
	cfg.BearerToken = token.Status.Token
	// Refused with the binding in force, not for want of it.
	awaitAllowed(t, kubeFor(t, cfg), "list", "", "configmaps")
	if _, err := crdsAt(t, cfg).Create(ctx, projectCRD("readers", "Reader", apiextensionsv1.NamespaceScoped, "integer"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a reader's CRD: %v, want 403", err)
	}

	// Even the project's cluster-admin cannot write a CRD's status: the names it holds decide what is served.
	createServiceAccount(t, admin, "default", "owner")
	bindServiceAccount(t, admin, "", "cluster-admin", "default", "owner")
	token, err = admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "owner", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.AnonymousClientConfig(m.projectConfig(t, p))
	cfg.BearerToken = token.Status.Token
	asOwner := crdsAt(t, cfg)
	awaitAllowed(t, kubeFor(t, cfg), "*", "*", "*")
	if _, err := asOwner.Create(ctx, projectCRD("owned", "Owned", apiextensionsv1.NamespaceScoped, "integer"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the project's cluster-admin's CRD: %v", err)
	}
	// The controller writes the status meanwhile: a conflict is tried again.
	eventually(t, "a tenant's write of its CRD's status refused", func() error {
		mine, err := asOwner.Get(ctx, "owned.crd.example.net", metav1.GetOptions{})
		if err != nil {
			return err
		}
		mine.Status.AcceptedNames = apiextensionsv1.CustomResourceDefinitionNames{Plural: "owned", Kind: "Owned"}
		_, err = asOwner.UpdateStatus(ctx, mine, metav1.UpdateOptions{})
		switch {
		case apierrors.IsForbidden(err):
			return nil
		case apierrors.IsConflict(err):
			return err
		}
		t.Fatalf("a tenant's write of its CRD's status: %v, want 403", err)
		return nil
	})
}

// TestProjectCRDInstances: a project's kinds are served to it alone, each
// project's instances validated and defaulted by its own CRD's schema.
func TestProjectCRDInstances(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	a, b := m.newProject(t, "crd-instances-a"), m.newProject(t, "crd-instances-b")
	inA, inB := crdsAt(t, m.projectConfig(t, a)), crdsAt(t, m.projectConfig(t, b))
	withRules := projectCRD("things", "Thing", apiextensionsv1.NamespaceScoped, "integer")
	props := withRules.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	size := props["spec"].Properties["size"]
	size.Default = &apiextensionsv1.JSON{Raw: []byte("1")}
	spec := props["spec"]
	spec.Properties["size"] = size
	spec.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.size >= 0", Message: "size is not negative"}}
	props["spec"] = spec
	if _, err := inA.Create(ctx, withRules.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := inB.Create(ctx, projectCRD("things", "Thing", apiextensionsv1.NamespaceScoped, "string"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, inA, "things.crd.example.net", apiextensionsv1.ConditionTrue)
	waitNames(t, inB, "things.crd.example.net", apiextensionsv1.ConditionTrue)

	things := schema.GroupVersionResource{Group: "crd.example.net", Version: "v1", Resource: "things"}
	thing := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/v1", "kind": "Thing",
			"metadata": map[string]any{"name": name}, "spec": spec}}
	}
	thingsA := m.projectDynamic(t, a).Resource(things).Namespace("default")
	thingsB := m.projectDynamic(t, b).Resource(things).Namespace("default")
	var made *unstructured.Unstructured
	eventually(t, "a Thing in project "+a, func() error {
		var err error
		made, err = thingsA.Create(ctx, thing("first", map[string]any{}), metav1.CreateOptions{})
		return err
	})
	if got, _, _ := unstructured.NestedInt64(made.Object, "spec", "size"); got != 1 {
		t.Errorf("project %s's default: spec.size %d, want 1: %v", a, got, made.Object)
	}
	if _, err := thingsA.Create(ctx, thing("negative", map[string]any{"size": int64(-1)}), metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "size is not negative") {
		t.Errorf("project %s's CEL rule: %v, want 422", a, err)
	}
	if _, err := thingsA.Create(ctx, thing("text", map[string]any{"size": "big"}), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a string size in project %s: %v, want 422", a, err)
	}
	// B's schema is B's own: a string size is right there, an integer is not.
	eventually(t, "a Thing in project "+b, func() error {
		_, err := thingsB.Create(ctx, thing("big", map[string]any{"size": "big"}), metav1.CreateOptions{})
		return err
	})
	if _, err := thingsB.Create(ctx, thing("number", map[string]any{"size": int64(3)}), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("an integer size in project %s: %v, want 422", b, err)
	}

	// Neither sees the other's.
	if _, err := thingsA.Get(ctx, "big", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("project %s gets project %s's Thing: %v", a, b, err)
	}
	for p, c := range map[string]dynamic.ResourceInterface{a: thingsA, b: thingsB} {
		list, err := c.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			t.Errorf("project %s lists %v %v, want its one Thing", p, err, list)
		}
	}
	w, err := thingsA.Watch(ctx, metav1.ListOptions{ResourceVersion: made.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := thingsB.Create(ctx, thing("second-b", map[string]any{"size": "s"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := thingsA.Create(ctx, thing("second-a", map[string]any{"size": int64(2)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if u, ok := ev.Object.(*unstructured.Unstructured); !ok || u.GetName() != "second-a" {
			t.Fatalf("project %s's watch delivered %v %v first", a, ev.Type, ev.Object)
		}
	case <-time.After(time.Minute):
		t.Fatal("no event")
	}
	// Deleting a namespace deletes the project's own kinds in it too.
	admin := m.projectKube(t, a)
	createNamespace(t, admin, "team")
	inTeam := m.projectDynamic(t, a).Resource(things).Namespace("team")
	if _, err := inTeam.Create(ctx, thing("doomed", map[string]any{}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Namespaces().Delete(ctx, "team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "namespace team of project "+a+" gone", func() error {
		if _, err := admin.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	createNamespace(t, admin, "team")
	if list, err := inTeam.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("namespace team made again holds %v %v", err, list)
	}

	// Deleting A's CRD deletes A's Things, not B's; defined again, it starts empty.
	if err := inA.Delete(ctx, "things.crd.example.net", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "project "+a+"'s CRD gone", func() error {
		if _, err := inA.Get(ctx, "things.crd.example.net", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	if list, err := thingsB.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 2 {
		t.Errorf("project %s's Things after %s deleted its CRD: %v %v", b, a, err, list)
	}
	if _, err := inA.Create(ctx, withRules.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, inA, "things.crd.example.net", apiextensionsv1.ConditionTrue)
	if list, err := thingsA.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("project %s's Things after its CRD was deleted and made again: %v %v", a, err, list)
	}

	// kubectl finds the kind through the project's discovery: apply, get
	// with the CRD's printer columns, api-resources.
	ka := m.projectKubeconfig(t, a)
	manifest := "apiVersion: crd.example.net/v1\nkind: Thing\nmetadata: {name: applied, namespace: default}\nspec: {size: 7}\n"
	eventuallyKubectl(t, m, ka, manifest, "apply", "-f", "-")
	if r := m.kubectlWith(t, ka, "", "get", "things", "applied", "-o", "jsonpath={.spec.size}"); r.err != nil || r.stdout != "7" {
		t.Errorf("kubectl get thing: %q %v %s", r.stdout, r.err, r.stderr)
	}
	if r := m.kubectlWith(t, ka, manifest, "apply", "--server-side", "-f", "-"); r.err != nil {
		t.Errorf("kubectl apply --server-side: %v %s", r.err, r.stderr)
	}
	if r := m.kubectlWith(t, ka, "", "api-resources", "--api-group=crd.example.net", "-o", "name"); r.err != nil || strings.TrimSpace(r.stdout) != "things.crd.example.net" {
		t.Errorf("kubectl api-resources in project %s: %q %v %s", a, r.stdout, r.err, r.stderr)
	}
	// kubectl explain reads the project's own OpenAPI v3: A's schema, not B's.
	if r := m.kubectlWith(t, ka, "", "explain", "things.spec.size"); r.err != nil || !strings.Contains(r.stdout, "<integer>") {
		t.Errorf("kubectl explain in project %s: %q %v %s", a, r.stdout, r.err, r.stderr)
	}
	if r := m.kubectlWith(t, m.projectKubeconfig(t, b), "", "explain", "things.spec.size"); r.err != nil || !strings.Contains(r.stdout, "<string>") {
		t.Errorf("kubectl explain in project %s: %q %v %s", b, r.stdout, r.err, r.stderr)
	}
	// And its OpenAPI v2, for clients that read that: A's schema in A, B's in B.
	for project, want := range map[string]string{a: "<integer>", b: "<string>"} {
		if r := m.kubectlWith(t, m.projectKubeconfig(t, project), "", "explain", "things.spec.size", "--output=plaintext-openapiv2"); r.err != nil || !strings.Contains(r.stdout, want) {
			t.Errorf("kubectl explain --output=plaintext-openapiv2 in project %s: %q %v %s, want %s", project, r.stdout, r.err, r.stderr, want)
		}
	}
	swagger, err := m.projectKube(t, a).Discovery().RESTClient().Get().AbsPath("/openapi/v2").SetHeader("Accept", "application/json").DoRaw(ctx)
	if err != nil || !strings.Contains(string(swagger), `"net.example.crd.v1.Thing"`) || !strings.Contains(string(swagger), `"/apis/crd.example.net/v1/namespaces/{namespace}/things/{name}"`) {
		t.Errorf("project %s's OpenAPI v2 lacks its Things: %v (%d bytes)", a, err, len(swagger))
	}

	// A third project stores Things at another version, which A's and B's
	// schemas do not know: each project's storage reads its own objects only,
	// so both kinds go on serving side by side.
	d := m.newProject(t, "crd-instances-d")
	v2 := projectCRD("things", "Thing", apiextensionsv1.NamespaceScoped, "boolean")
	v2.Spec.Versions[0].Name = "v2"
	if _, err := crdsAt(t, m.projectConfig(t, d)).Create(ctx, v2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, crdsAt(t, m.projectConfig(t, d)), "things.crd.example.net", apiextensionsv1.ConditionTrue)
	thingsD := m.projectDynamic(t, d).Resource(schema.GroupVersionResource{Group: "crd.example.net", Version: "v2", Resource: "things"}).Namespace("default")
	eventually(t, "a v2 Thing in project "+d, func() error {
		obj := thing("v2", map[string]any{"size": true})
		obj.SetAPIVersion("crd.example.net/v2")
		_, err := thingsD.Create(ctx, obj, metav1.CreateOptions{})
		return err
	})
	if _, err := thingsA.Create(ctx, thing("after-v2", map[string]any{"size": int64(4)}), metav1.CreateOptions{}); err != nil {
		t.Errorf("project %s's Thing after %s stored a v2 one: %v", a, d, err)
	}
	eventually(t, "project "+a+" lists its own Things", func() error {
		list, err := thingsA.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 2 || !slices.ContainsFunc(list.Items, func(u unstructured.Unstructured) bool { return u.GetName() == "after-v2" }) {
			return fmt.Errorf("%v %v", err, list)
		}
		return nil
	})
	if list, err := thingsD.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
		t.Errorf("project %s lists %v %v", d, err, list)
	}

	// A schema changed is served at once: A's Things gain a field.
	// The controller may write the CRD's status meanwhile: a conflict is tried again.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := inA.Get(ctx, "things.crd.example.net", metav1.GetOptions{})
		if err != nil {
			return err
		}
		current.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["color"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		_, err = inA.Update(ctx, current, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "project "+a+"'s new field", func() error {
		got, err := thingsA.Create(ctx, thing(fmt.Sprintf("colored-%d", time.Now().UnixNano()), map[string]any{"color": "red"}), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if c, _, _ := unstructured.NestedString(got.Object, "spec", "color"); c != "red" {
			return fmt.Errorf("spec.color pruned: %v", got.Object)
		}
		return nil
	})

	// Another project that defines no Thing does not have the kind, nor its group in discovery.
	c := m.newProject(t, "crd-instances-c")
	if _, err := m.projectDynamic(t, c).Resource(things).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("project %s without the CRD lists Things: %v", c, err)
	}
	groups, err := m.projectKube(t, c).Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		if g.Name == "crd.example.net" {
			t.Errorf("project %s's discovery lists another project's group", c)
		}
	}
	if err := m.projectKube(t, c).Discovery().RESTClient().Get().AbsPath("/apis/crd.example.net/v1").Do(ctx).Error(); !apierrors.IsNotFound(err) {
		t.Errorf("project %s's discovery document of another project's group: %v", c, err)
	}
	if v2, err := m.projectKube(t, c).Discovery().RESTClient().Get().AbsPath("/openapi/v2").SetHeader("Accept", "application/json").DoRaw(ctx); err != nil || strings.Contains(string(v2), "net.example.crd") {
		t.Errorf("project %s's OpenAPI v2 names another project's kinds: %v", c, err)
	}
	// An outsider and an anonymous client get none of A's own documents.
	for _, token := range []string{"carol-token", ""} {
		for _, path := range []string{"/apis/crd.example.net", "/apis/crd.example.net/v1", "/openapi/v3/apis/crd.example.net/v1", "/openapi/v2"} {
			body, err := m.as(t, token, tenancy.ProjectPath(a)).Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
			if err == nil || strings.Contains(string(body), "things") {
				t.Errorf("%q reads %s of project %s: %v %s", token, path, a, err, body)
			}
		}
	}
}

// classHandlers is how many schema classes' handlers the server holds.
func classHandlers(t *testing.T, m *milo) float64 {
	t.Helper()
	body, err := m.kube(t).Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		var v float64
		if rest, ok := strings.CutPrefix(line, "milo_project_crd_class_handlers "); ok {
			if _, err := fmt.Sscanf(rest, "%g", &v); err == nil {
				return v
			}
		}
	}
	t.Fatal("no milo_project_crd_class_handlers in /metrics")
	return 0
}

// definedKind has project p define the test CRD of plural and kind (an
// integer size) and returns its CRDs and the kind in namespace default,
// once served.
func definedKind(t *testing.T, m *milo, p, plural, kind string) (apiextensionsclient.CustomResourceDefinitionInterface, dynamic.ResourceInterface) {
	t.Helper()
	ctx := context.Background()
	crds := crdsAt(t, m.projectConfig(t, p))
	if _, err := crds.Create(ctx, projectCRD(plural, kind, apiextensionsv1.NamespaceScoped, "integer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, crds, plural+".crd.example.net", apiextensionsv1.ConditionTrue)
	kinds := m.projectDynamic(t, p).Resource(schema.GroupVersionResource{Group: "crd.example.net", Version: "v1", Resource: plural}).Namespace("default")
	eventually(t, "the kind served in "+p, func() error { _, err := kinds.List(ctx, metav1.ListOptions{}); return err })
	return crds, kinds
}

// setMaximum changes the schema of the test CRD name: spec.size at most limit.
func setMaximum(t *testing.T, crds apiextensionsclient.CustomResourceDefinitionInterface, name string, limit float64) {
	t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		size := spec.Properties["size"]
		size.Maximum = &limit
		spec.Properties["size"] = size
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		_, err = crds.Update(ctx, crd, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestProjectCRDSchemaChurnIsBounded: a tenant changing its CRD's schema over
// and over, using the kind after each change, does not pile up the server's
// handlers: those of schemas no CRD has any more are torn down.
func TestProjectCRDSchemaChurnIsBounded(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	crds, churns := definedKind(t, m, m.newProject(t, "crd-churn"), "churns", "Churn")
	before := classHandlers(t, m)
	const changes = 48
	for i := range changes {
		// Each schema allows one more: a size of i is valid under the new one only.
		setMaximum(t, crds, "churns.crd.example.net", float64(i))
		eventually(t, "the changed schema served", func() error {
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/v1", "kind": "Churn",
				"metadata": map[string]any{"generateName": "c-"}, "spec": map[string]any{"size": int64(i)}}}
			_, err := churns.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		})
	}
	if grown := classHandlers(t, m) - before; grown > changes/2 {
		t.Errorf("%d schema changes left %.0f more class handlers, want at most %d: the handlers of old schemas are not torn down", changes, grown, changes/2)
	}
}

// TestProjectCRDWatchesEndWithTheirSchema: a watch of a project's kind
// ends when the project changes its CRD's schema (as upstream ends every
// watch of a CRD whose storage it rebuilds), so the client watches again under
// the new schema; another project's watch of the same kind and schema,
// served by the same shared handler, goes on.
func TestProjectCRDWatchesEndWithTheirSchema(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	changer, bystander := m.newProject(t, "crd-watch-changer"), m.newProject(t, "crd-watch-bystander")
	gvr := schema.GroupVersionResource{Group: "crd.example.net", Version: "v1", Resource: "tides"}
	watches := map[string]watch.Interface{}
	var changed apiextensionsclient.CustomResourceDefinitionInterface
	for _, p := range []string{changer, bystander} {
		crds, tides := definedKind(t, m, p, "tides", "Tide")
		if p == changer {
			changed = crds
		}
		w, err := tides.Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		watches[p] = w
	}
	setMaximum(t, changed, "tides.crd.example.net", 7)
	deadline := time.After(30 * time.Second)
	for ended := false; !ended; {
		select {
		case _, open := <-watches[changer].ResultChan():
			ended = !open
		case <-deadline:
			t.Fatal("the watch of a kind whose schema changed is still open after 30 s")
		}
	}
	tide := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/v1", "kind": "Tide",
		"metadata": map[string]any{"name": "high"}, "spec": map[string]any{"size": int64(9)}}}
	if _, err := m.projectDynamic(t, bystander).Resource(gvr).Namespace("default").Create(ctx, tide, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, open := <-watches[bystander].ResultChan():
		if !open || ev.Type != watch.Added {
			t.Fatalf("the other project's watch gave %v (open %v), want its object added", ev.Type, open)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other project's watch saw nothing of its own create")
	}
}

// TestProjectCRDTerminatingRefusesCreates: while a project's CRD is being
// deleted, its kind refuses creates by POST and by server-side apply (403,
// as upstream), and updates go on, so that an instance's finalizer can be
// removed and the CRD can go.
func TestProjectCRDTerminatingRefusesCreates(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	crds, ebbs := definedKind(t, m, m.newProject(t, "crd-terminating"), "ebbs", "Ebb")
	ebb := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/v1", "kind": "Ebb",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"size": int64(1)}}}
	}
	held := ebb("held")
	held.SetFinalizers([]string{"e2e.example.net/hold"})
	eventually(t, "the held Ebb", func() error { _, err := ebbs.Create(ctx, held, metav1.CreateOptions{}); return err })
	if err := crds.Delete(ctx, "ebbs.crd.example.net", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a create refused while the CRD terminates", func() error {
		_, err := ebbs.Create(ctx, ebb("posted"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "terminating") {
			return fmt.Errorf("create: %v, want 403 naming the terminating CRD", err)
		}
		return nil
	})
	if _, err := ebbs.Apply(ctx, "applied", ebb("applied"), metav1.ApplyOptions{FieldManager: "e2e"}); !apierrors.IsForbidden(err) {
		t.Fatalf("a server-side apply that creates while the CRD terminates: %v, want 403", err)
	}
	// A CRD of the same group is named while the other waits on its instance.
	if _, err := crds.Create(ctx, projectCRD("floods", "Flood", apiextensionsv1.NamespaceScoped, "integer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, crds, "floods.crd.example.net", apiextensionsv1.ConditionTrue)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := ebbs.Get(ctx, "held", metav1.GetOptions{})
		if err != nil {
			return err
		}
		obj.SetFinalizers(nil)
		_, err = ebbs.Update(ctx, obj, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("removing an instance's finalizer while its CRD terminates: %v", err)
	}
	eventually(t, "the CRD gone", func() error {
		if _, err := crds.Get(ctx, "ebbs.crd.example.net", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v, want 404", err)
		}
		return nil
	})
}

// TestProjectCRDClassIsTheServers: a tenant cannot choose which schema
// class serves it — a class named in its CRD's annotations is ignored — so
// it cannot have another project's requests served by a handler built from
// its own schema.
func TestProjectCRDClassIsTheServers(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	victim, attacker := m.newProject(t, "crd-victim"), m.newProject(t, "crd-attacker")
	inVictim, inAttacker := crdsAt(t, m.projectConfig(t, victim)), crdsAt(t, m.projectConfig(t, attacker))
	if _, err := inVictim.Create(ctx, projectCRD("poisons", "Poison", apiextensionsv1.NamespaceScoped, "integer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	target, err := projectcrds.ClassOf(waitNames(t, inVictim, "poisons.crd.example.net", apiextensionsv1.ConditionTrue))
	if err != nil {
		t.Fatal(err)
	}
	poisoned := projectCRD("poisons", "Poison", apiextensionsv1.NamespaceScoped, "string")
	poisoned.Annotations = map[string]string{"projectcrds.milo.internal/class": string(target)}
	if _, err := inAttacker.Create(ctx, poisoned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, inAttacker, "poisons.crd.example.net", apiextensionsv1.ConditionTrue)
	gvr := schema.GroupVersionResource{Group: "crd.example.net", Version: "v1", Resource: "poisons"}
	poison := func(name string, size any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/v1", "kind": "Poison",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"size": size}}}
	}
	// The attacker's request comes first, so its handler is built first.
	eventually(t, "the attacker's Poison", func() error {
		_, err := m.projectDynamic(t, attacker).Resource(gvr).Namespace("default").Create(ctx, poison("a", "text"), metav1.CreateOptions{})
		return err
	})
	inV := m.projectDynamic(t, victim).Resource(gvr).Namespace("default")
	eventually(t, "the victim's Poison", func() error {
		_, err := inV.Create(ctx, poison("v", int64(3)), metav1.CreateOptions{})
		return err
	})
	if _, err := inV.Create(ctx, poison("w", "text"), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("the victim's Poison validated by the attacker's schema: %v, want 422", err)
	}
}

// TestProjectCRDQuota: a ResourceQuota in a project counts the instances of
// a kind the project defines for itself (count/<plural>.<group>), and
// refuses the create past its limit; another project's instances of a kind
// of the same name are not counted.
func TestProjectCRDQuota(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	a, b := m.newProject(t, "crd-quota-a"), m.newProject(t, "crd-quota-b")
	crds := crdsAt(t, m.projectConfig(t, a))
	if _, err := crds.Create(ctx, projectCRD("gadgets", "Gadget", apiextensionsv1.NamespaceScoped, "integer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, crds, "gadgets.crd.example.net", apiextensionsv1.ConditionTrue)
	gadgets := schema.GroupVersionResource{Group: "crd.example.net", Version: "v1", Resource: "gadgets"}
	gadget := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/v1", "kind": "Gadget",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{}}}
	}
	inA := m.projectDynamic(t, a).Resource(gadgets).Namespace("default")
	eventually(t, "a Gadget in project "+a, func() error {
		_, err := inA.Create(ctx, gadget("a-0"), metav1.CreateOptions{})
		return err
	})
	// A quota of project B, which defines no Gadgets, counted just before
	// A's: the controller's discovery shared by projects is then B's,
	// which does not list A's own kind.
	name := corev1.ResourceName("count/gadgets.crd.example.net")
	hard := corev1.ResourceList{name: resource.MustParse("2")}
	for _, p := range []string{b, a} {
		quotas := m.projectKube(t, p).CoreV1().ResourceQuotas("default")
		if _, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gadgets"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{a: 1, b: 0}[p]
		eventually(t, "the quota of project "+p+" counted", func() error {
			q, err := quotas.Get(ctx, "gadgets", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if used, ok := q.Status.Used[name]; !ok || used.Value() != want {
				return fmt.Errorf("status.used %v, want %s: %d", q.Status.Used, name, want)
			}
			return nil
		})
	}
	if _, err := inA.Create(ctx, gadget("a-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := inA.Create(ctx, gadget("a-2"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		t.Fatalf("the third Gadget under a quota of 2: %v, want 403 exceeded quota", err)
	}
}

// TestProjectCRDGarbageCollection: owner references to and from a project's
// own kinds are collected as for any kind, inside the project: a ConfigMap
// owned by an Owner goes with it; an Owner owned by a ConfigMap goes with
// it, also in a project whose CRD of the resource has another version; an
// Owner deleted in the foreground waits for its blocking dependent. Another
// project's objects of the same kind and names are never touched, and a
// reference to another project's owner keeps nothing alive. The
// all-projects view, which the collector reads, serves project kinds as
// object metadata only, and only to the platform.
func TestProjectCRDGarbageCollection(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	a, b := m.newProject(t, "crd-gc-a"), m.newProject(t, "crd-gc-b")
	inA, inB := crdsAt(t, m.projectConfig(t, a)), crdsAt(t, m.projectConfig(t, b))
	if _, err := inA.Create(ctx, projectCRD("owners", "Owner", apiextensionsv1.NamespaceScoped, "integer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// B's Owners are of another schema and version: the collector reads
	// every project's through one version, and acts in B through B's own.
	crdB := projectCRD("owners", "Owner", apiextensionsv1.NamespaceScoped, "string")
	crdB.Spec.Versions[0].Name = "v2"
	if _, err := inB.Create(ctx, crdB, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, inA, "owners.crd.example.net", apiextensionsv1.ConditionTrue)
	waitNames(t, inB, "owners.crd.example.net", apiextensionsv1.ConditionTrue)
	version := map[string]string{a: "v1", b: "v2"}
	owners := func(p string) dynamic.ResourceInterface {
		return m.projectDynamic(t, p).Resource(schema.GroupVersionResource{Group: "crd.example.net", Version: version[p], Resource: "owners"}).Namespace("default")
	}
	newOwner := func(p, name string, refs ...metav1.OwnerReference) *unstructured.Unstructured {
		t.Helper()
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/" + version[p], "kind": "Owner",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{}}}
		o.SetOwnerReferences(refs)
		var made *unstructured.Unstructured
		eventually(t, "Owner "+name+" in project "+p, func() error {
			var err error
			made, err = owners(p).Create(ctx, o, metav1.CreateOptions{})
			return err
		})
		return made
	}
	configMaps := func(p string) corev1client.ConfigMapInterface {
		return m.projectKube(t, p).CoreV1().ConfigMaps("default")
	}
	newConfigMap := func(p, name string, finalizers []string, refs ...metav1.OwnerReference) *corev1.ConfigMap {
		t.Helper()
		cm, err := configMaps(p).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: refs, Finalizers: finalizers}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	refTo := func(o metav1.Object, apiVersion, kind string, block bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: o.GetName(), UID: o.GetUID(), BlockOwnerDeletion: &block}
	}
	gone := func(what string, get func() error) {
		t.Helper()
		err := framework.Eventually(time.Minute, func() error {
			if err := get(); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there: %v", err)
			}
			return nil
		})
		if err != nil {
			var collector []string
			for _, line := range strings.Split(m.Logs.String(), "\n") {
				if strings.Contains(line, "garbage-collector") {
					collector = append(collector, line)
				}
			}
			t.Fatalf("%s collected: %v; the collector's log:\n%s", what, err, strings.Join(collector, "\n"))
		}
	}

	// A ConfigMap owned by an Owner, in both projects under the same names.
	ownerA, ownerB := newOwner(a, "w1"), newOwner(b, "w1")
	newConfigMap(a, "cm1", nil, refTo(ownerA, "crd.example.net/v1", "Owner", false))
	newConfigMap(b, "cm1", nil, refTo(ownerB, "crd.example.net/v2", "Owner", false))
	// B's reference to A's Owner, by A's name and UID, finds nothing in B.
	keep := newOwner(a, "keep")
	newConfigMap(b, "cross", nil, refTo(keep, "crd.example.net/v1", "Owner", false))
	gone("project "+b+"'s ConfigMap naming project "+a+"'s Owner", func() error {
		_, err := configMaps(b).Get(ctx, "cross", metav1.GetOptions{})
		return err
	})
	if err := owners(a).Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("project "+a+"'s ConfigMap of its deleted Owner", func() error {
		_, err := configMaps(a).Get(ctx, "cm1", metav1.GetOptions{})
		return err
	})
	if _, err := configMaps(b).Get(ctx, "cm1", metav1.GetOptions{}); err != nil {
		t.Errorf("project %s's ConfigMap of its own Owner w1: %v", b, err)
	}
	for p, name := range map[string]string{b: "w1", a: "keep"} {
		if _, err := owners(p).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("project %s's Owner %s: %v", p, name, err)
		}
	}

	// An Owner owned by a ConfigMap, in B (version v2).
	holder := newConfigMap(b, "holder", nil)
	newOwner(b, "held", refTo(holder, "v1", "ConfigMap", false))
	if err := configMaps(b).Delete(ctx, "holder", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("project "+b+"'s Owner of its deleted ConfigMap", func() error {
		_, err := owners(b).Get(ctx, "held", metav1.GetOptions{})
		return err
	})

	// Foreground: the Owner stays until its blocking dependent is gone,
	// which a finalizer holds.
	fg := newOwner(a, "fg")
	newConfigMap(a, "fg-dependent", []string{"example.net/hold"}, refTo(fg, "crd.example.net/v1", "Owner", true))
	// The collector reads ConfigMaps in order: once it has collected one
	// made after the dependent, it knows the dependent.
	newConfigMap(a, "fg-marker", nil, metav1.OwnerReference{APIVersion: "crd.example.net/v1", Kind: "Owner", Name: "never", UID: "never"})
	gone("a ConfigMap of a missing Owner", func() error {
		_, err := configMaps(a).Get(ctx, "fg-marker", metav1.GetOptions{})
		return err
	})
	foreground := metav1.DeletePropagationForeground
	if err := owners(a).Delete(ctx, "fg", metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the foreground deletion reaching the dependent", func() error {
		cm, err := configMaps(a).Get(ctx, "fg-dependent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.DeletionTimestamp == nil {
			return fmt.Errorf("dependent not being deleted")
		}
		return nil
	})
	if o, err := owners(a).Get(ctx, "fg", metav1.GetOptions{}); err != nil || o.GetDeletionTimestamp() == nil {
		t.Fatalf("the Owner deleted in the foreground while its dependent stays: %v %v", err, o)
	}
	if _, err := configMaps(a).Patch(ctx, "fg-dependent", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("the Owner deleted in the foreground", func() error {
		_, err := owners(a).Get(ctx, "fg", metav1.GetOptions{})
		return err
	})

	// The all-projects view: metadata of both projects' Owners for the
	// platform, 406 for whole objects, 403 for a tenant.
	ownersV1 := schema.GroupVersionResource{Group: "crd.example.net", Version: "v1", Resource: "owners"}
	all := m.configAt(t, tenancy.AllProjectsPath)
	meta, err := metadata.NewForConfig(all)
	if err != nil {
		t.Fatal(err)
	}
	list, err := meta.Resource(ownersV1).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range list.Items {
		seen[o.Annotations[tenancy.AnnotationKey]+"/"+o.Name] = true
	}
	for _, want := range []string{a + "/keep", b + "/w1"} {
		if !seen[want] {
			t.Errorf("the all-projects view's Owners %v lack %s", seen, want)
		}
	}
	if _, err := dynamicFor(t, all).Resource(ownersV1).List(ctx, metav1.ListOptions{}); !apierrors.IsNotAcceptable(err) {
		t.Errorf("whole Owners in the all-projects view: %v, want 406", err)
	}
	aliceConfig := rest.AnonymousClientConfig(m.configAt(t, tenancy.AllProjectsPath))
	aliceConfig.BearerToken = "alice-token"
	aliceMeta, err := metadata.NewForConfig(aliceConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aliceMeta.Resource(ownersV1).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a tenant's all-projects list of Owners: %v, want 403", err)
	}
	// A platform user the platform's RBAC lets list Owners across projects
	// is refused too: tenants' annotations are the platform code's only.
	name := "owner-reader-carol"
	if _, err := m.kube(t).RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{ownersV1.Group}, Resources: []string{"owners"}, Verbs: []string{"list", "watch"}}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := m.kube(t).RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	carolConfig := rest.AnonymousClientConfig(m.configAt(t, tenancy.AllProjectsPath))
	carolConfig.BearerToken = "carol-token"
	carolMeta, err := metadata.NewForConfig(carolConfig)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "carol, allowed by RBAC, refused the Owners of every project", func() error {
		_, err := carolMeta.Resource(ownersV1).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "platform's controllers only") {
			return fmt.Errorf("%v, want 403 from the view", err)
		}
		return nil
	})

	// Deleting the CRD deletes its Owners; what they owned goes too, though
	// the kind is not served any more when the collector gets to it.
	last := newOwner(b, "last")
	newConfigMap(b, "of-last", nil, refTo(last, "crd.example.net/v2", "Owner", false))
	if err := inB.Delete(ctx, "owners.crd.example.net", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("project "+b+"'s ConfigMap of an Owner its CRD's deletion took", func() error {
		_, err := configMaps(b).Get(ctx, "of-last", metav1.GetOptions{})
		return err
	})
}

// TestProjectCRDSelectorsPagesAndScale: a project's kind answers field
// selectors on its selectableFields, label selectors, pages with continue
// tokens and `kubectl scale` through its scale subresource, as on a cluster.
func TestProjectCRDSelectorsPagesAndScale(t *testing.T) {
	m := crdServer(t)
	ctx := context.Background()
	p := m.newProject(t, "crd-dials")
	crd := projectCRD("dials", "Dial", apiextensionsv1.NamespaceScoped, "integer")
	v := &crd.Spec.Versions[0]
	v.Schema.OpenAPIV3Schema.Properties["spec"] = apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"replicas": {Type: "integer"}, "color": {Type: "string"}}}
	v.Schema.OpenAPIV3Schema.Properties["status"] = apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"replicas": {Type: "integer"}}}
	v.Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
		Scale: &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"}}
	v.SelectableFields = []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}}
	crds := crdsAt(t, m.projectConfig(t, p))
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, crds, "dials.crd.example.net", apiextensionsv1.ConditionTrue)
	dials := m.projectDynamic(t, p).Resource(schema.GroupVersionResource{Group: "crd.example.net", Version: "v1", Resource: "dials"}).Namespace("default")
	colors, tiers := []string{"red", "blue", "red", "blue", "red"}, []string{"a", "b", "a", "b", "b"}
	for i := range colors {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.example.net/v1", "kind": "Dial",
			"metadata": map[string]any{"name": fmt.Sprintf("d%d", i), "labels": map[string]any{"tier": tiers[i]}},
			"spec":     map[string]any{"replicas": int64(1), "color": colors[i]}}}
		eventually(t, "Dial "+obj.GetName(), func() error { _, err := dials.Create(ctx, obj, metav1.CreateOptions{}); return err })
	}
	names := func(opts metav1.ListOptions) []string {
		t.Helper()
		list, err := dials.List(ctx, opts)
		if err != nil {
			t.Fatalf("list %+v: %v", opts, err)
		}
		var out []string
		for _, item := range list.Items {
			out = append(out, item.GetName())
		}
		return out
	}
	if got := names(metav1.ListOptions{FieldSelector: "spec.color=red"}); !slices.Equal(got, []string{"d0", "d2", "d4"}) {
		t.Errorf("field selector spec.color=red: %v", got)
	}
	if got := names(metav1.ListOptions{LabelSelector: "tier=a"}); !slices.Equal(got, []string{"d0", "d2"}) {
		t.Errorf("label selector tier=a: %v", got)
	}
	if _, err := dials.List(ctx, metav1.ListOptions{FieldSelector: "spec.size=1"}); !apierrors.IsBadRequest(err) {
		t.Errorf("a field selector on a field the CRD does not select by: %v, want 400", err)
	}
	var paged []string
	opts := metav1.ListOptions{Limit: 2}
	for pages := 0; ; pages++ {
		list, err := dials.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > 2 || pages > 3 {
			t.Fatalf("page %d holds %d items, want at most 2", pages, len(list.Items))
		}
		for _, item := range list.Items {
			paged = append(paged, item.GetName())
		}
		if list.GetContinue() == "" {
			break
		}
		opts.Continue = list.GetContinue()
	}
	if !slices.Equal(paged, []string{"d0", "d1", "d2", "d3", "d4"}) {
		t.Errorf("pages of 2 gave %v", paged)
	}
	if r := m.kubectlWith(t, m.projectKubeconfig(t, p), "", "scale", "-n", "default", "dials.crd.example.net/d1", "--replicas=3"); r.err != nil {
		t.Fatalf("kubectl scale: %v %s", r.err, r.stderr)
	}
	got, err := dials.Get(ctx, "d1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if replicas, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); replicas != 3 {
		t.Errorf("after kubectl scale --replicas=3: spec.replicas %d", replicas)
	}
}
