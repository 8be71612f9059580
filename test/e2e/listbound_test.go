package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/tenancy"
)

// sharedMaxListItems is the shared server's --max-project-list-items: small,
// so that every test's tenant clients (kubectl, informers) run under the bound.
const sharedMaxListItems = 100

// sharedListConcurrency is the shared server's --project-list-concurrency.
const sharedListConcurrency = 4

// TestProjectListsAreBounded: one LIST of a project returns at most
// --max-project-list-items items. A larger page is cut with a continue token
// (also a page asked at resourceVersion 0, which the watch cache would serve
// whole), paging collects everything, kubectl and informers see every object,
// an unpaged list past the bound is refused with 400 and not cut short, and the
// platform's superusers are not bounded.
func TestProjectListsAreBounded(t *testing.T) {
	m := shared
	ctx := context.Background()
	p := m.newProject(t, "lists")
	admin := m.projectKube(t, p)
	createNamespace(t, admin, "many")
	createServiceAccount(t, admin, "many", "lister")
	bindServiceAccount(t, admin, "", "cluster-admin", "many", "lister")
	token, err := admin.CoreV1().ServiceAccounts("many").CreateToken(ctx, "lister", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tenant := m.as(t, token.Status.Token, tenancy.ProjectPath(p))
	awaitAllowed(t, tenant, "list", "", "configmaps")
	const created = sharedMaxListItems + 50
	for i := range created {
		var labels map[string]string
		if i%50 == 0 {
			labels = map[string]string{"pick": "yes"}
		}
		createConfigMap(t, admin, "many", fmt.Sprintf("cm-%03d", i), nil, labels)
	}

	all, err := admin.CoreV1().ConfigMaps("many").List(ctx, metav1.ListOptions{})
	if err != nil || len(all.Items) < created {
		t.Fatalf("the platform's superuser lists %d of at least %d without pages: %v", len(all.Items), created, err)
	}
	var want []string
	for _, cm := range all.Items {
		want = append(want, cm.Name)
	}

	_, err = tenant.CoreV1().ConfigMaps("many").List(ctx, metav1.ListOptions{})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "in pages") {
		t.Fatalf("an unpaged list of %d items: %v, want 400 asking for pages", len(want), err)
	}
	picked, err := tenant.CoreV1().ConfigMaps("many").List(ctx, metav1.ListOptions{LabelSelector: "pick=yes"})
	if err != nil || len(picked.Items) != 3 {
		t.Fatalf("an unpaged list of 3 selected items: %v items, %v", len(picked.Items), err)
	}

	for _, rv := range []string{"", "0"} {
		page, err := tenant.CoreV1().ConfigMaps("many").List(ctx, metav1.ListOptions{Limit: 500, ResourceVersion: rv})
		if err != nil || len(page.Items) != sharedMaxListItems || page.Continue == "" {
			t.Fatalf("a page of 500 at resourceVersion %q: %d items, continue %q, %v; want %d and a continue token", rv, len(page.Items), page.Continue, err, sharedMaxListItems)
		}
	}
	var paged []string
	for opts := (metav1.ListOptions{Limit: 500}); ; {
		page, err := tenant.CoreV1().ConfigMaps("many").List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range page.Items {
			paged = append(paged, cm.Name)
		}
		if opts.Continue = page.Continue; opts.Continue == "" {
			break
		}
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("paging collected %d items, want the %d the superuser lists", len(paged), len(want))
	}

	informer := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(tenant.CoreV1().RESTClient(), "configmaps", "many", fields.Everything()),
		&corev1.ConfigMap{}, 0, cache.Indexers{})
	stop := make(chan struct{})
	defer close(stop)
	go informer.Run(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	if n := len(informer.GetStore().ListKeys()); n < len(want) {
		t.Fatalf("the informer holds %d ConfigMaps, want %d", n, len(want))
	}

	kubeconfig := m.tokenKubeconfig(t, token.Status.Token, tenancy.ProjectPath(p))
	r := m.kubectlWith(t, kubeconfig, "", "get", "configmaps", "-n", "many", "-o", "name")
	if r.err != nil || strings.Count(r.stdout, "configmap/") != len(want) {
		t.Fatalf("kubectl get: %d ConfigMaps, want %d: %v %s", strings.Count(r.stdout, "configmap/"), len(want), r.err, r.stderr)
	}
	r = m.kubectlWith(t, kubeconfig, "", "get", "configmaps", "-n", "many", "--chunk-size=0")
	if r.err == nil || !strings.Contains(r.stderr, "in pages") {
		t.Fatalf("kubectl get --chunk-size=0: %v %s, want refused", r.err, r.stderr)
	}

	// What the server reads for itself is not bounded: authorizing the
	// tenant's LIST of ClusterRoleBindings reads every one of the project's.
	for i := range sharedMaxListItems + 20 {
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("viewer-%03d", i)},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("viewer-%03d", i)}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bindings, err := tenant.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{Limit: 500})
	if err != nil || len(bindings.Items) != sharedMaxListItems || bindings.Continue == "" {
		t.Fatalf("a page of the project's %d ClusterRoleBindings: %d items, %v", sharedMaxListItems+21, len(bindings.Items), err)
	}
}
