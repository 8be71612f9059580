package clusterroleaggregation

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func role(name string, labels map[string]string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules}
}

func rule(verb, resource string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: []string{verb}, APIGroups: []string{""}, Resources: []string{resource}}
}

func TestAggregate(t *testing.T) {
	agg := role("view", nil)
	agg.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
		{MatchLabels: map[string]string{"aggregate-to-view": "true"}},
		{MatchLabels: map[string]string{"extra": "true"}},
	}}
	cases := []struct {
		name       string
		candidates []any
		want       []rbacv1.PolicyRule
	}{
		{"nothing selected", []any{agg, role("other", nil, rule("get", "pods"))}, []rbacv1.PolicyRule{}},
		{"by name order, each rule once", []any{agg,
			role("b", map[string]string{"aggregate-to-view": "true"}, rule("get", "secrets"), rule("get", "configmaps")),
			role("a", map[string]string{"aggregate-to-view": "true"}, rule("get", "configmaps")),
		}, []rbacv1.PolicyRule{rule("get", "configmaps"), rule("get", "secrets")}},
		{"selectors in order", []any{agg,
			role("a", map[string]string{"extra": "true"}, rule("list", "leases")),
			role("z", map[string]string{"aggregate-to-view": "true"}, rule("get", "secrets")),
		}, []rbacv1.PolicyRule{rule("get", "secrets"), rule("list", "leases")}},
		{"its own rules are not its input", []any{role("view", map[string]string{"aggregate-to-view": "true"}, rule("delete", "everything"))}, []rbacv1.PolicyRule{}},
	}
	for _, c := range cases {
		if got := Aggregate(agg, c.candidates); !equality.Semantic.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
