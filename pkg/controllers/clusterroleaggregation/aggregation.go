// Package clusterroleaggregation fills the aggregated ClusterRoles a project
// defines with the rules of the project's ClusterRoles their
// aggregationRule selects, as Kubernetes' cluster-role aggregation controller
// does for a cluster. A project's aggregation reads only that project's
// ClusterRoles; the platform's are aggregated by the hierarchy controllers.
//
// One informer over the all-projects view holds every project's ClusterRoles,
// indexed by project; a change to any ClusterRole of a project queues that
// project's aggregated ClusterRoles, and a fixed pool of workers writes them
// with clients of their own project.
package clusterroleaggregation

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/controllers/manager"
)

// Name is the controller's name in the registry of controllers.
const Name = "clusterrole-aggregation"

// Controller aggregates projects' ClusterRoles.
type Controller struct {
	clients *allprojects.Clients
}

// New prepares the controller.
func New(clients *allprojects.Clients) *Controller { return &Controller{clients: clients} }

type term struct {
	*Controller
	roles cache.SharedIndexInformer
	queue workqueue.TypedRateLimitingInterface[allprojects.Key]
}

func newREST(cfg *rest.Config, hc *http.Client) (rest.Interface, error) {
	c, err := rbacv1client.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return c.RESTClient(), nil
}

// Run works until ctx ends.
func (ctl *Controller) Run(ctx context.Context, workers int) {
	roles, err := ctl.clients.Informer(newREST, "clusterroles", &rbacv1.ClusterRole{}, true, nil, nil)
	if err == nil {
		err = allprojects.IndexByProject(roles)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Preparing informer", "controller", Name)
		return
	}
	t := &term{Controller: ctl, roles: roles, queue: manager.NewTenantQueue[allprojects.Key](Name)}
	defer t.queue.ShutDown()
	changed := func(obj any) {
		if k, ok := allprojects.KeyOf(obj, true); ok {
			t.enqueueAggregatedOf(k.ID)
		}
	}
	if !manager.StartInformers(ctx, Name, cache.ResourceEventHandlerFuncs{AddFunc: changed, UpdateFunc: func(_, o any) { changed(o) }, DeleteFunc: changed}, roles) {
		return
	}
	manager.Work(ctx, Name, t.queue, workers, t.sync)
}

// enqueueAggregatedOf queues every aggregated ClusterRole of one project.
func (t *term) enqueueAggregatedOf(projectID string) {
	objs, _ := t.roles.GetIndexer().ByIndex(allprojects.ByProject, projectID)
	for _, o := range objs {
		if r, ok := o.(*rbacv1.ClusterRole); ok && r.AggregationRule != nil {
			if k, ok := allprojects.KeyOf(r, true); ok {
				t.queue.Add(k)
			}
		}
	}
}

func (t *term) sync(ctx context.Context, key allprojects.Key) error {
	ctx = allprojects.Within(ctx, key)
	obj, exists, err := t.roles.GetStore().GetByKey(key.StoreKey())
	if err != nil || !exists {
		return err
	}
	role := obj.(*rbacv1.ClusterRole)
	if role.AggregationRule == nil {
		return nil
	}
	siblings, err := t.roles.GetIndexer().ByIndex(allprojects.ByProject, key.ID)
	if err != nil {
		return err
	}
	rules := Aggregate(role, siblings)
	if equality.Semantic.DeepEqual(rules, role.Rules) {
		return nil
	}
	client, err := rbacv1client.NewForConfigAndClient(t.clients.Config(key.Project), t.clients.HTTPClient())
	if err != nil {
		return err
	}
	fresh, err := client.ClusterRoles().Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	fresh.Rules = rules
	if _, err := client.ClusterRoles().Update(ctx, fresh, metav1.UpdateOptions{FieldManager: "clusterrole-aggregation-controller"}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// Aggregate returns the rules role aggregates from candidates (ClusterRoles
// of its own project): those of every ClusterRole one of its selectors
// matches, in the order of the selectors and then of the roles' names, each
// rule once, as Kubernetes aggregates them.
func Aggregate(role *rbacv1.ClusterRole, candidates []any) []rbacv1.PolicyRule {
	var roles []*rbacv1.ClusterRole
	for _, c := range candidates {
		if r, ok := c.(*rbacv1.ClusterRole); ok && r.Name != role.Name {
			roles = append(roles, r)
		}
	}
	sort.Slice(roles, func(i, j int) bool { return roles[i].Name < roles[j].Name })
	rules := []rbacv1.PolicyRule{}
	// A set of the rules kept: a project may aggregate many rules, and
	// comparing each with all before it would cost every project's
	// aggregation the square of one project's rule count.
	seen := map[string]struct{}{}
	for _, selector := range role.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&selector)
		if err != nil {
			continue
		}
		for _, r := range roles {
			if !sel.Matches(labels.Set(r.Labels)) {
				continue
			}
			for _, rule := range r.Rules {
				k := ruleKey(rule)
				if _, dup := seen[k]; !dup {
					seen[k] = struct{}{}
					rules = append(rules, rule)
				}
			}
		}
	}
	return rules
}

// ruleKey is a rule's identity: two rules with the same key are equal.
func ruleKey(r rbacv1.PolicyRule) string {
	b, _ := json.Marshal(r) // fields in a fixed order (a nil and an empty list count as two rules: harmless)
	return string(b)
}
