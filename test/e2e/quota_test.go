package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"go.miloapis.com/milo/pkg/tenancy"
)

var (
	registrationsGVR      = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "resourceregistrations"}
	grantsGVR             = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "resourcegrants"}
	claimsGVR             = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "resourceclaims"}
	bucketsGVR            = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "allowancebuckets"}
	claimPoliciesGVR      = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "claimcreationpolicies"}
	grantPoliciesGVR      = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "grantcreationpolicies"}
	projectSuspensionsGVR = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "projectsuspensions"}
)

func quotaObject(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "quota.miloapis.com/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}}
}

func grantSpec(kind, name, resourceType string, amount int64) map[string]any {
	return map[string]any{"consumerRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": kind, "name": name},
		"allowances": []any{map[string]any{"resourceType": resourceType, "buckets": []any{map[string]any{"amount": amount}}}}}
}

// conditionIs waits for the named condition of an object to be True.
func conditionIs(t *testing.T, r dynamic.ResourceInterface, name, condType string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s %s", name, condType), func() error {
		u, err := r.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == condType {
				if c["status"] == "True" {
					return nil
				}
				return fmt.Errorf("%s %v: %v", condType, c["status"], c["message"])
			}
		}
		return fmt.Errorf("no %s condition yet", condType)
	})
}

// bucketIs waits for the bucket of consumer and resourceType, read through r, to show limit and allocated.
func bucketIs(t *testing.T, r dynamic.ResourceInterface, consumer, resourceType string, limit, allocated int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("bucket of %s %s at %d/%d", consumer, resourceType, allocated, limit), func() error {
		list, err := r.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, b := range list.Items {
			c, _, _ := unstructured.NestedString(b.Object, "spec", "consumerRef", "name")
			rt, _, _ := unstructured.NestedString(b.Object, "spec", "resourceType")
			if c != consumer || rt != resourceType {
				continue
			}
			l, _, _ := unstructured.NestedInt64(b.Object, "status", "limit")
			a, _, _ := unstructured.NestedInt64(b.Object, "status", "allocated")
			av, _, _ := unstructured.NestedInt64(b.Object, "status", "available")
			n, _, _ := unstructured.NestedInt64(b.Object, "status", "claimCount")
			if l != limit || a != allocated || av != max(0, limit-allocated) {
				return fmt.Errorf("limit %d, allocated %d, available %d, claims %d", l, a, av, n)
			}
			return nil
		}
		return fmt.Errorf("no bucket among %d", len(list.Items))
	})
}

// TestProviderQuotas is the quota issue's story: a provider limits an
// organization's projects with a grant of the built-in registration; 50
// parallel creates against a limit of 10 leave exactly 10; a deletion frees
// its unit; a registration and CEL policy of its own charge premium
// ConfigMaps to their project in bytes; a grant policy gives new projects
// an allowance; the organization's owner reads her buckets in her context
// and can change none of it; nobody else sees them; a suspended project
// refuses writes until the suspension is lifted.
func TestProviderQuotas(t *testing.T) {
	m := shared
	ctx := context.Background()
	n := projectSeq.Add(1)
	org := fmt.Sprintf("quota-%d", n)
	ns := tenancy.OrganizationNamespace(org)
	m.createOrganizationAs(t, "alice-token", org)
	admin := m.dynamic(t)
	conditionIs(t, admin.Resource(registrationsGVR), "projects-per-organization", "Active")
	conditionIs(t, admin.Resource(claimPoliciesGVR), "projects-per-organization", "Ready")

	// The provider allows the organization 10 projects.
	eventually(t, "the organization's namespace", func() error {
		_, err := m.kube(t).CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err
	})
	if _, err := admin.Resource(grantsGVR).Namespace(ns).Create(ctx, quotaObject("ResourceGrant", ns, "projects",
		grantSpec("Organization", org, "resourcemanager.miloapis.com/projects", 10)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conditionIs(t, admin.Resource(grantsGVR).Namespace(ns), "projects", "Active")

	// 50 creates at once: exactly 10 pass, the others are refused naming
	// the resource type, the limit and the usage.
	aliceOrg := m.dynamicAs(t, "alice-token", tenancy.OrganizationPath(org))
	project := func(name string, labels map[string]any) *unstructured.Unstructured {
		p := objectOf("Project", name, map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": org}})
		if labels != nil {
			p.Object["metadata"].(map[string]any)["labels"] = labels
		}
		return p
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var created []string
	var other []error
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s-p%d", org, i)
			_, err := aliceOrg.Resource(projectsGVR).Create(ctx, project(name, nil), metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created = append(created, name)
			case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `resource type "resourcemanager.miloapis.com/projects"`) ||
				!strings.Contains(err.Error(), "limit 10 project, 10 in use, 1 requested"):
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if len(created) != 10 || len(other) > 0 {
		t.Fatalf("50 parallel creates against a limit of 10: %d created, unexpected errors %v", len(created), other)
	}
	list, err := admin.Resource(projectsGVR).List(ctx, metav1.ListOptions{LabelSelector: tenancy.OrganizationLabel + "=" + org})
	if err != nil || len(list.Items) != 10 {
		t.Fatalf("projects of %s: %v %v", org, len(list.Items), err)
	}
	// Alice, the organization's owner, reads her bucket in her context.
	aliceBuckets := aliceOrg.Resource(bucketsGVR).Namespace(ns)
	bucketIs(t, aliceBuckets, org, "resourcemanager.miloapis.com/projects", 10, 10)
	// A dry run claims nothing: refused at the limit, and no claim appears.
	if _, err := aliceOrg.Resource(projectsGVR).Create(ctx, project(org+"-dry", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Fatalf("a dry-run create at the limit: %v", err)
	}

	// Deleting a project frees its unit, within a second or so.
	for _, p := range created[:1] {
		if err := aliceOrg.Resource(projectsGVR).Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bucketIs(t, aliceBuckets, org, "resourcemanager.miloapis.com/projects", 10, 9)
	if _, err := aliceOrg.Resource(projectsGVR).Create(ctx, project(org+"-again", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a create after a deletion freed a unit: %v", err)
	}
	// Projects per organization is metered: counted from the server's
	// cache of Projects, no claim stored.
	claims, err := admin.Resource(claimsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 0 {
		t.Fatalf("claims of %s: %d %v", org, len(claims.Items), err)
	}

	// The quotas are the platform's: the owner can change none of them in
	// her context, whatever her role; a project serves none of it.
	aliceGrants := aliceOrg.Resource(grantsGVR).Namespace(ns)
	if _, err := aliceGrants.Create(ctx, quotaObject("ResourceGrant", ns, "more", grantSpec("Organization", org, "resourcemanager.miloapis.com/projects", 1000)), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the owner grants herself more: %v", err)
	}
	if err := aliceGrants.Delete(ctx, "projects", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the owner deletes her grant: %v", err)
	}
	if _, err := m.dynamicAs(t, "alice-token", tenancy.ProjectPath(created[1])).Resource(grantsGVR).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("grants inside a project: %v", err)
	}
	// Nor can she stop the server storing claims and grants with a
	// ResourceQuota of her namespace counting them.
	if _, err := m.as(t, "alice-token", tenancy.OrganizationPath(org)).CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-claims"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/resourceclaims.quota.miloapis.com": resource.MustParse("0")}}}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("a ResourceQuota counting claims: %v", err)
	}
	// Nobody else reads them: carol gets the same answer here as for an
	// organization that does not exist; alice the same in another one's.
	outsider := func(token, o string) error {
		_, err := m.dynamicAs(t, token, tenancy.OrganizationPath(o)).Resource(bucketsGVR).Namespace(tenancy.OrganizationNamespace(o)).List(ctx, metav1.ListOptions{})
		return err
	}
	for _, c := range []struct{ token, org string }{{"carol-token", org}, {"carol-token", "no-such-org"}, {"alice-token", "acme"}} {
		if err := outsider(c.token, c.org); !apierrors.IsForbidden(err) {
			t.Fatalf("%s reads the buckets of %s: %v", c.token, c.org, err)
		}
	}

	// A registration and policy of the provider's own: premium ConfigMaps
	// cost 5 bytes each of their project's allowance (Allocation), others nothing.
	premium := fmt.Sprintf("e2e.example/premium-bytes-%d", n)
	tier := fmt.Sprintf("premium-%d", n)
	regName, policyName := fmt.Sprintf("premium-%d", n), fmt.Sprintf("premium-configmaps-%d", n)
	t.Cleanup(func() {
		_ = admin.Resource(claimPoliciesGVR).Delete(ctx, policyName, metav1.DeleteOptions{})
		_ = admin.Resource(registrationsGVR).Delete(ctx, regName, metav1.DeleteOptions{})
	})
	if _, err := admin.Resource(registrationsGVR).Create(ctx, quotaObject("ResourceRegistration", "", regName, map[string]any{
		"consumerType": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project"}, "type": "Allocation",
		"resourceType": premium, "baseUnit": "byte", "displayUnit": "byte", "unitConversionFactor": int64(1),
		"claimingResources": []any{map[string]any{"kind": "ConfigMap"}}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Resource(claimPoliciesGVR).Create(ctx, quotaObject("ClaimCreationPolicy", "", policyName, map[string]any{
		"trigger": map[string]any{"resource": map[string]any{"apiVersion": "v1", "kind": "ConfigMap"},
			"constraints": []any{map[string]any{"expression": fmt.Sprintf(`has(trigger.metadata.labels) && trigger.metadata.labels["tier"] == %q`, tier)}}},
		"target": map[string]any{"resourceClaimTemplate": map[string]any{"metadata": map[string]any{"annotations": map[string]any{"made-by": "{{user.name}}"}},
			"spec": map[string]any{"requests": []any{map[string]any{"resourceType": premium, "amount": int64(5)}}}}}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conditionIs(t, admin.Resource(registrationsGVR), regName, "Active")
	conditionIs(t, admin.Resource(claimPoliciesGVR), policyName, "Ready")
	web, api := created[1], created[2]
	for _, p := range []string{web, api} {
		m.waitProjectReady(t, p)
	}
	if _, err := admin.Resource(grantsGVR).Namespace(ns).Create(ctx, quotaObject("ResourceGrant", ns, "web-premium", grantSpec("Project", web, premium, 12)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conditionIs(t, admin.Resource(grantsGVR).Namespace(ns), "web-premium", "Active")
	cm := func(name string, premium bool) *corev1.ConfigMap {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if premium {
			c.Labels = map[string]string{"tier": tier}
		}
		return c
	}
	aliceWeb := m.as(t, "alice-token", tenancy.ProjectPath(web))
	createNamespace(t, m.projectKube(t, web), "default")
	for i, c := range []struct {
		cm      *corev1.ConfigMap
		refused bool
	}{{cm("gold-1", true), false}, {cm("gold-2", true), false}, {cm("gold-3", true), true}, {cm("plain", false), false}} {
		_, err := aliceWeb.CoreV1().ConfigMaps("default").Create(ctx, c.cm, metav1.CreateOptions{})
		if c.refused != (err != nil) || (c.refused && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "limit 12 byte, 10 in use, 5 requested"))) {
			t.Fatalf("configmap %d (%s) in %s: %v", i, c.cm.Name, web, err)
		}
	}
	bucketIs(t, aliceBuckets, web, premium, 12, 10)
	// Another project, without a grant for it, is not limited by web's.
	createNamespace(t, m.projectKube(t, api), "default")
	for i := range 3 {
		if _, err := m.as(t, "alice-token", tenancy.ProjectPath(api)).CoreV1().ConfigMaps("default").Create(ctx, cm(fmt.Sprint("gold-", i), true), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a premium configmap in %s: %v", api, err)
		}
	}
	// A grant limits what was there before it too: api's three premium
	// ConfigMaps are claimed when its bucket appears.
	if _, err := admin.Resource(grantsGVR).Namespace(ns).Create(ctx, quotaObject("ResourceGrant", ns, "api-premium", grantSpec("Project", api, premium, 16)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bucketIs(t, aliceBuckets, api, premium, 16, 15)
	if _, err := m.as(t, "alice-token", tenancy.ProjectPath(api)).CoreV1().ConfigMaps("default").Create(ctx, cm("gold-3", true), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a premium configmap in %s past its grant: %v", api, err)
	}
	webClaims, err := admin.Resource(claimsGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "quota.miloapis.com/policy=" + policyName,
		FieldSelector: "spec.consumerRef.name=" + web})
	if err != nil || len(webClaims.Items) != 2 || webClaims.Items[0].GetAnnotations()["made-by"] != "alice" {
		t.Fatalf("claims of the premium policy: %v %v", webClaims, err)
	}
	if err := aliceOrg.Resource(claimsGVR).Namespace(ns).Delete(ctx, webClaims.Items[0].GetName(), metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the owner deletes a claim: %v", err)
	}
	// Deleting a premium ConfigMap frees its bytes.
	if err := aliceWeb.CoreV1().ConfigMaps("default").Delete(ctx, "gold-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	bucketIs(t, aliceBuckets, web, premium, 12, 5)
	// On etcd, a create that fails stores no claim and holds nothing: the
	// claim is stored in the object's own transaction, so the 5 bytes are
	// free at once for the next create. (On SQL storage the claim is
	// stored before the object and holds them until it is found orphaned.)
	if os.Getenv("MILO_E2E_STORAGE") == "" {
		failedCreateHoldsNothing(t, aliceWeb, aliceBuckets, web, premium, cm)
	}

	// A grant policy gives every project labelled for the starter plan
	// three namespaces (its default and kube-system count); raising the
	// organization's grant makes room for it.
	starter := fmt.Sprintf("starter-%d", n)
	gpName := fmt.Sprintf("starter-namespaces-%d", n)
	t.Cleanup(func() { _ = admin.Resource(grantPoliciesGVR).Delete(ctx, gpName, metav1.DeleteOptions{}) })
	if _, err := admin.Resource(grantPoliciesGVR).Create(ctx, quotaObject("GrantCreationPolicy", "", gpName, map[string]any{
		"trigger": map[string]any{"resource": map[string]any{"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project"},
			"constraints": []any{map[string]any{"expression": fmt.Sprintf(`has(trigger.metadata.labels) && trigger.metadata.labels["plan"] == %q`, starter)}}},
		"target": map[string]any{"resourceGrantTemplate": map[string]any{"metadata": map[string]any{},
			"spec": map[string]any{"consumerRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project", "name": "{{trigger.metadata.name}}"},
				"allowances": []any{map[string]any{"resourceType": "core/namespaces", "buckets": []any{map[string]any{"amount": int64(3)}}}}}}}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conditionIs(t, admin.Resource(grantPoliciesGVR), gpName, "Ready")
	setGrantSpec(t, admin.Resource(grantsGVR).Namespace(ns), "projects", grantSpec("Organization", org, "resourcemanager.miloapis.com/projects", 20))
	bucketIs(t, aliceBuckets, org, "resourcemanager.miloapis.com/projects", 20, 10)
	small := org + "-starter"
	if _, err := aliceOrg.Resource(projectsGVR).Create(ctx, project(small, map[string]any{"plan": starter}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.waitProjectReady(t, small)
	grantName := gpName + "-project-" + small
	conditionIs(t, admin.Resource(grantsGVR).Namespace(ns), grantName, "Active")
	bucketIs(t, aliceBuckets, small, "core/namespaces", 3, 2)
	aliceSmall := m.as(t, "alice-token", tenancy.ProjectPath(small))
	if _, err := aliceSmall.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "one"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the starter project's first namespace: %v", err)
	}
	if _, err := aliceSmall.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "two"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"core/namespaces" of Project `+small) {
		t.Fatalf("the starter project's second namespace: %v", err)
	}

	// Suspension: the suspended project refuses creates and updates, of
	// its owner and of the platform's administrators alike; reads and
	// deletes work; lifting it restores writes at once.
	suspension := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "ProjectSuspension",
		"metadata": map[string]any{"name": web + "-billing"},
		"spec":     map[string]any{"projectRef": map[string]any{"name": web}, "reason": "Billing", "reinstateAuthority": "Operator", "requestedBy": "billing-system"}}}
	if _, err := admin.Resource(projectSuspensionsGVR).Create(ctx, suspension, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "writes in the suspended project refused", func() error {
		_, err := aliceWeb.CoreV1().ConfigMaps("default").Create(ctx, cm("while-suspended", false), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `ProjectSuspension "`+web+`-billing", reason Billing`) {
			return fmt.Errorf("create: %v", err)
		}
		return nil
	})
	if _, err := m.projectKube(t, web).CoreV1().ConfigMaps("default").Create(ctx, cm("by-admin", false), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("an administrator's create in the suspended project: %v", err)
	}
	plain, err := aliceWeb.CoreV1().ConfigMaps("default").Get(ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("a read in the suspended project: %v", err)
	}
	plain.Data = map[string]string{"k": "v"}
	if _, err := aliceWeb.CoreV1().ConfigMaps("default").Update(ctx, plain, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("an update in the suspended project: %v", err)
	}
	if err := aliceWeb.CoreV1().ConfigMaps("default").Delete(ctx, "plain", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("a delete in the suspended project: %v", err)
	}
	if _, err := aliceSmall.CoreV1().ConfigMaps("one").Create(ctx, cm("elsewhere", false), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a write in another project while %s is suspended: %v", web, err)
	}
	eventually(t, "the suspension reports its phase", func() error {
		s, err := admin.Resource(projectSuspensionsGVR).Get(ctx, web+"-billing", metav1.GetOptions{})
		if phase, _, _ := unstructured.NestedString(s.Object, "status", "phase"); err != nil || phase != "Active" {
			return fmt.Errorf("phase %q, %v", phase, err)
		}
		return nil
	})
	// The organization reads its projects' suspensions, and only those (a
	// label naming it, forged on another's, is replaced by admission), but
	// cannot lift one of Operator authority.
	forged := suspension.DeepCopy()
	forged.SetName(org + "-forged")
	forged.SetLabels(map[string]string{tenancy.OrganizationLabel: org})
	forged.Object["spec"].(map[string]any)["projectRef"] = map[string]any{"name": org + "-not-a-project"}
	if _, err := admin.Resource(projectSuspensionsGVR).Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.Resource(projectSuspensionsGVR).Delete(ctx, forged.GetName(), metav1.DeleteOptions{})
	})
	orgSuspensions := aliceOrg.Resource(projectSuspensionsGVR)
	suspended, err := orgSuspensions.List(ctx, metav1.ListOptions{})
	if err != nil || len(suspended.Items) != 1 || suspended.Items[0].GetName() != web+"-billing" {
		t.Fatalf("the organization's suspensions: %v %v, want %s-billing only", suspended.Items, err, web)
	}
	if _, err := orgSuspensions.Get(ctx, forged.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a suspension of no project of the organization, read there: %v, want 404", err)
	}
	if err := orgSuspensions.Delete(ctx, web+"-billing", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only the platform's operators") {
		t.Fatalf("the organization lifts a suspension of Operator authority: %v, want 403", err)
	}
	if _, err := orgSuspensions.Create(ctx, forged, metav1.CreateOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("the organization creates a suspension: %v, want 405", err)
	}
	if err := admin.Resource(projectSuspensionsGVR).Delete(ctx, web+"-billing", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "writes restored once the suspension is lifted", func() error {
		_, err := aliceWeb.CoreV1().ConfigMaps("default").Create(ctx, cm("after", false), metav1.CreateOptions{})
		return err
	})

	// One of Consumer authority the organization's owner lifts herself,
	// with kubectl in her organization's context.
	consumer := suspension.DeepCopy()
	consumer.SetName(web + "-unpaid")
	consumer.Object["spec"].(map[string]any)["reinstateAuthority"] = "Consumer"
	if _, err := admin.Resource(projectSuspensionsGVR).Create(ctx, consumer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "writes refused under the consumer's suspension", func() error {
		if _, err := aliceWeb.CoreV1().ConfigMaps("default").Create(ctx, cm("unpaid", false), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			return fmt.Errorf("create: %v", err)
		}
		return nil
	})
	orgKubeconfig := m.tokenKubeconfig(t, "alice-token", tenancy.OrganizationPath(org))
	if r := m.kubectlWith(t, orgKubeconfig, "", "delete", "projectsuspension", web+"-unpaid"); r.err != nil {
		t.Fatalf("alice lifts the consumer's suspension: %v %s", r.err, r.stderr)
	}
	eventually(t, "writes restored once the organization lifted it", func() error {
		_, err := aliceWeb.CoreV1().ConfigMaps("default").Create(ctx, cm("paid", false), metav1.CreateOptions{})
		return err
	})

	// A deleted project takes its grants, buckets and suspensions with it:
	// a later project of its name starts without them.
	suspension.SetName(api + "-abuse")
	suspension.Object["spec"].(map[string]any)["projectRef"] = map[string]any{"name": api}
	if _, err := admin.Resource(projectSuspensionsGVR).Create(ctx, suspension, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := aliceOrg.Resource(projectsGVR).Delete(ctx, api, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted project's grant, bucket and suspension gone", func() error {
		if _, err := admin.Resource(grantsGVR).Namespace(ns).Get(ctx, "api-premium", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("grant: %v", err)
		}
		if _, err := admin.Resource(projectSuspensionsGVR).Get(ctx, api+"-abuse", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("suspension: %v", err)
		}
		list, err := admin.Resource(bucketsGVR).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.consumerRef.name=" + api})
		if err != nil || len(list.Items) != 0 {
			return fmt.Errorf("buckets: %d %v", len(list.Items), err)
		}
		return nil
	})
}

// storedObjects counts, through the project's API, every object the
// project stores (Events aside): what its objects bucket must show.
func storedObjects(t *testing.T, m *milo, project string) (int64, error) {
	t.Helper()
	lists, err := m.projectKube(t, project).Discovery().ServerPreferredResources()
	if err != nil {
		return 0, err
	}
	dyn := m.projectDynamic(t, project)
	var n int64
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return 0, err
		}
		for _, r := range l.APIResources {
			if r.Name == "events" || strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return 0, fmt.Errorf("listing %s: %w", r.Name, err)
			}
			n += int64(len(items.Items))
		}
	}
	return n, nil
}

// bucketNumbers reads the allocated and limit of consumer's bucket of resourceType.
func bucketNumbers(r dynamic.ResourceInterface, consumer, resourceType string) (allocated, limit int64, err error) {
	list, err := r.List(context.Background(), metav1.ListOptions{FieldSelector: "spec.consumerRef.name=" + consumer})
	if err != nil {
		return 0, 0, err
	}
	for _, b := range list.Items {
		if rt, _, _ := unstructured.NestedString(b.Object, "spec", "resourceType"); rt == resourceType {
			a, _, _ := unstructured.NestedInt64(b.Object, "status", "allocated")
			l, _, _ := unstructured.NestedInt64(b.Object, "status", "limit")
			return a, l, nil
		}
	}
	return 0, 0, fmt.Errorf("no %s bucket of %s", resourceType, consumer)
}

// objectsBucketMatches waits for project's objects bucket to show what it
// stores, at limit, and returns that count.
func objectsBucketMatches(t *testing.T, m *milo, buckets dynamic.ResourceInterface, project string, limit int64) int64 {
	t.Helper()
	var n int64
	eventually(t, "the objects bucket of "+project+" counting what it stores", func() error {
		stored, err := storedObjects(t, m, project)
		if err != nil {
			return err
		}
		allocated, l, err := bucketNumbers(buckets, project, "storage.miloapis.com/objects")
		if err != nil || allocated != stored || l != limit {
			return fmt.Errorf("bucket %d of %d, %d stored, %v", allocated, l, stored, err)
		}
		n = stored
		return nil
	})
	return n
}

// TestStoredObjectsAndBytesPerProject: the built-in objects and bytes per
// project quotas, granted by the platform and nothing else, count every
// object a project stores — those stored before the grant too — refuse
// what does not fit (50 writers for 10 free objects: exactly 10 stored),
// free what is deleted, and limit no other project.
func TestStoredObjectsAndBytesPerProject(t *testing.T) {
	m := shared
	ctx := context.Background()
	n := projectSeq.Add(1)
	org := fmt.Sprintf("stored-%d", n)
	ns := tenancy.OrganizationNamespace(org)
	m.createOrganizationAs(t, "alice-token", org)
	admin := m.dynamic(t)
	conditionIs(t, admin.Resource(registrationsGVR), "objects-per-project", "Active")
	conditionIs(t, admin.Resource(registrationsGVR), "stored-bytes-per-project", "Active")
	aliceOrg := m.dynamicAs(t, "alice-token", tenancy.OrganizationPath(org))
	web, free := org+"-web", org+"-free"
	for _, p := range []string{web, free} {
		if _, err := aliceOrg.Resource(projectsGVR).Create(ctx, objectOf("Project", p, map[string]any{
			"ownerRef": map[string]any{"kind": "Organization", "name": org}}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		m.waitProjectReady(t, p)
		createNamespace(t, m.projectKube(t, p), "default")
	}
	aliceWeb := m.as(t, "alice-token", tenancy.ProjectPath(web)).CoreV1().ConfigMaps("default")
	// The namespace's own objects, which the server adds, are there first.
	eventually(t, "the default namespace's service account and CA", func() error {
		if _, err := m.projectKube(t, web).CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := aliceWeb.Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
	for i := range 3 {
		if _, err := aliceWeb.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("before-", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grants := admin.Resource(grantsGVR).Namespace(ns)
	if _, err := grants.Create(ctx, quotaObject("ResourceGrant", ns, "web-objects", grantSpec("Project", web, "storage.miloapis.com/objects", 1000)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	aliceBuckets := aliceOrg.Resource(bucketsGVR).Namespace(ns)
	stored := objectsBucketMatches(t, m, aliceBuckets, web, 1000)

	// Ten objects free; fifty writers.
	limit := stored + 10
	setGrantSpec(t, grants, "web-objects", grantSpec("Project", web, "storage.miloapis.com/objects", limit))
	bucketIs(t, aliceBuckets, web, "storage.miloapis.com/objects", limit, stored)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var created int
	var other []error
	for i := range 50 {
		wg.Go(func() {
			_, err := aliceWeb.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("racer-", i)}}, metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(),
				fmt.Sprintf(`quota exceeded for resource type "storage.miloapis.com/objects" of Project %s: limit %d object, %d in use, 1 requested`, web, limit, limit)):
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	if created != 10 || len(other) > 0 {
		t.Fatalf("50 parallel creates for 10 free objects: %d created, unexpected errors %v", created, other)
	}
	objectsBucketMatches(t, m, aliceBuckets, web, limit)
	// Any kind counts, a namespace as much as a Secret; deleting frees.
	if _, err := m.as(t, "alice-token", tenancy.ProjectPath(web)).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "more"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a namespace past the limit: %v", err)
	}
	if err := aliceWeb.Delete(ctx, "racer-0", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := aliceWeb.Delete(ctx, "before-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.as(t, "alice-token", tenancy.ProjectPath(web)).CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "after-delete"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a create after a delete freed an object: %v", err)
	}
	// Another project, without a grant, is not limited by web's.
	for i := range 15 {
		createConfigMap(t, m.as(t, "alice-token", tenancy.ProjectPath(free)), "default", fmt.Sprint("cm-", i), nil, nil)
	}

	// Bytes: 100 KB beyond what web stores; a 60 KB ConfigMap fits, a
	// second does not, nor does growing the first; shrinking it does.
	if _, err := grants.Create(ctx, quotaObject("ResourceGrant", ns, "web-bytes", grantSpec("Project", web, "storage.miloapis.com/bytes", 1<<40)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var used int64
	eventually(t, "the bytes bucket of "+web, func() error {
		a, l, err := bucketNumbers(aliceBuckets, web, "storage.miloapis.com/bytes")
		if err != nil || l != 1<<40 || a == 0 {
			return fmt.Errorf("bucket %d of %d: %v", a, l, err)
		}
		used = a
		return nil
	})
	setGrantSpec(t, grants, "web-bytes", grantSpec("Project", web, "storage.miloapis.com/bytes", used+100_000))
	bucketIs(t, aliceBuckets, web, "storage.miloapis.com/bytes", used+100_000, used)
	// Make room for two more objects, so only bytes can refuse.
	for _, name := range []string{"before-1", "before-2"} {
		if err := aliceWeb.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	big := func(name string, size int) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": strings.Repeat("x", size)}}
	}
	eventually(t, "a 60 KB ConfigMap stored", func() error {
		_, err := aliceWeb.Create(ctx, big("large-1", 60_000), metav1.CreateOptions{})
		return err
	})
	if _, err := aliceWeb.Create(ctx, big("large-2", 60_000), metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"storage.miloapis.com/bytes" of Project `+web) {
		t.Fatalf("a second 60 KB ConfigMap: %v", err)
	}
	if _, err := aliceWeb.Update(ctx, big("large-1", 120_000), metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("growing the ConfigMap past the limit: %v", err)
	}
	if _, err := aliceWeb.Update(ctx, big("large-1", 10_000), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("shrinking the ConfigMap: %v", err)
	}
	if _, err := aliceWeb.Create(ctx, big("large-2", 60_000), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a 60 KB ConfigMap once the first shrank: %v", err)
	}
	// The project's owner cannot lift the limits: the grants are the
	// platform's, and nothing in the project removes them.
	if err := aliceOrg.Resource(grantsGVR).Namespace(ns).Delete(ctx, "web-bytes", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the owner deletes the bytes grant: %v", err)
	}
	if err := m.as(t, "alice-token", tenancy.ProjectPath(web)).CoreV1().ResourceQuotas("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := aliceWeb.Create(ctx, big("large-3", 60_000), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a third 60 KB ConfigMap: %v", err)
	}
}

// failedCreateHoldsNothing: a premium ConfigMap created again fails, and its
// 5 bytes are free at once for another (the bucket holds 12, 5 in use).
func failedCreateHoldsNothing(t *testing.T, aliceWeb kubernetes.Interface, buckets dynamic.ResourceInterface, web, premium string, cm func(string, bool) *corev1.ConfigMap) {
	t.Helper()
	ctx := context.Background()
	if _, err := aliceWeb.CoreV1().ConfigMaps("default").Create(ctx, cm("gold-2", true), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating gold-2 again: %v", err)
	}
	if _, err := aliceWeb.CoreV1().ConfigMaps("default").Create(ctx, cm("gold-4", true), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a premium configmap after a failed create: %v", err)
	}
	bucketIs(t, buckets, web, premium, 12, 10)
	if err := aliceWeb.CoreV1().ConfigMaps("default").Delete(ctx, "gold-4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	bucketIs(t, buckets, web, premium, 12, 5)
}

// setGrantSpec sets the spec of the stored grant name, again on a
// conflict: the quota controller writes grants' status.
func setGrantSpec(t *testing.T, grants dynamic.ResourceInterface, name string, spec map[string]any) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		g, err := grants.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		g.Object["spec"] = spec
		_, err = grants.Update(context.Background(), g, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
