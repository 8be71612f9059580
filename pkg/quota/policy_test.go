package quota

import (
	"maps"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
)

type fixedConsumers struct{ project, org string }

func (f fixedConsumers) Default(kind string) (Consumer, bool) {
	switch {
	case kind == KindProject && f.project != "":
		return Consumer{Kind: KindProject, Name: f.project}, true
	case kind == KindOrganization && f.org != "":
		return Consumer{Kind: KindOrganization, Name: f.org}, true
	}
	return Consumer{}, false
}

func (f fixedConsumers) KindFor(resourceType string) string { return KindProject }

func (f fixedConsumers) Organization(c Consumer) (string, error) {
	if c.Kind == KindOrganization {
		return c.Name, nil
	}
	return f.org, nil
}

func claimPolicy(constraints []string, consumerKind, consumerName string, annotations map[string]string) *quotav1alpha1.ClaimCreationPolicy {
	p := &quotav1alpha1.ClaimCreationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "premium"},
		Spec: quotav1alpha1.ClaimCreationPolicySpec{Trigger: quotav1alpha1.ClaimTriggerSpec{Resource: quotav1alpha1.ClaimTriggerResource{APIVersion: "v1", Kind: "ConfigMap"}},
			Target: quotav1alpha1.ClaimTargetSpec{ResourceClaimTemplate: quotav1alpha1.ResourceClaimTemplate{
				Metadata: quotav1alpha1.ObjectMetaTemplate{Annotations: annotations},
				Spec: quotav1alpha1.ResourceClaimSpec{ConsumerRef: quotav1alpha1.ConsumerRef{Kind: consumerKind, Name: consumerName},
					Requests: []quotav1alpha1.ResourceRequest{{ResourceType: "premium-bytes", Amount: 5}}}}}}}
	for _, c := range constraints {
		p.Spec.Trigger.Constraints = append(p.Spec.Trigger.Constraints, quotav1alpha1.ConditionExpression{Expression: c})
	}
	return p
}

func TestClaimPolicies(t *testing.T) {
	premium := map[string]any{"metadata": map[string]any{"name": "big", "namespace": "default", "labels": map[string]any{"tier": "premium"}}}
	plain := map[string]any{"metadata": map[string]any{"name": "small", "namespace": "default"}}
	trigger := TriggerRef{Project: "web", Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "default", Name: "big", UID: "uid-1"}
	user := map[string]any{"name": "alice", "groups": []any{"developers"}}
	for _, tc := range []struct {
		name         string
		policy       *quotav1alpha1.ClaimCreationPolicy
		object       map[string]any
		consumers    fixedConsumers
		compileError string
		match        bool
		consumer     Consumer
		annotation   string
		// readsVars: some expression reads the Vars; a policy without one
		// is planned from none, as admission does.
		readsVars bool
	}{
		{name: "a constraint on a label", readsVars: true, policy: claimPolicy([]string{`has(trigger.metadata.labels) && trigger.metadata.labels["tier"] == "premium"`}, "", "", nil),
			object: premium, consumers: fixedConsumers{"web", "acme"}, match: true, consumer: Consumer{KindProject, "web"}},
		{name: "the constraint does not hold", readsVars: true, policy: claimPolicy([]string{`has(trigger.metadata.labels) && trigger.metadata.labels["tier"] == "premium"`}, "", "", nil),
			object: plain, consumers: fixedConsumers{"web", "acme"}},
		{name: "the user", readsVars: true, policy: claimPolicy([]string{`user.groups.exists(g, g == "developers")`}, KindOrganization, "", nil),
			object: plain, consumers: fixedConsumers{"web", "acme"}, match: true, consumer: Consumer{KindOrganization, "acme"}},
		{name: "a templated consumer and annotation", readsVars: true, policy: claimPolicy(nil, KindOrganization, "{{trigger.metadata.namespace + '-org'}}", map[string]string{"note": "for {{trigger.metadata.name}}!"}),
			object: premium, consumers: fixedConsumers{"web", "acme"}, match: true, consumer: Consumer{KindOrganization, "default-org"}, annotation: "for big!"},
		{name: "no expressions: planned without vars", policy: claimPolicy(nil, "", "", map[string]string{"note": "fixed"}),
			object: premium, consumers: fixedConsumers{"web", "acme"}, match: true, consumer: Consumer{KindProject, "web"}, annotation: "fixed"},
		{name: "an expression in an annotation only", readsVars: true, policy: claimPolicy(nil, "", "", map[string]string{"note": "{{trigger.metadata.name}}"}),
			object: premium, consumers: fixedConsumers{"web", "acme"}, match: true, consumer: Consumer{KindProject, "web"}, annotation: "big"},
		{name: "an expression in the consumer's kind only", readsVars: true, policy: claimPolicy(nil, "{{'Organization'}}", "", nil),
			object: premium, consumers: fixedConsumers{"web", "acme"}, match: true, consumer: Consumer{KindOrganization, "acme"}},
		{name: "nobody to charge: no claim", policy: claimPolicy(nil, KindProject, "", nil), object: plain, consumers: fixedConsumers{"", "acme"}},
		{name: "a constraint that is not a bool", policy: claimPolicy([]string{`1 + 2`}, "", "", nil), compileError: "not bool"},
		{name: "a constraint that does not parse", policy: claimPolicy([]string{`trigger.metadata.name ==`}, "", "", nil), compileError: "Syntax error"},
		{name: "a template that does not parse", policy: claimPolicy(nil, "", "{{ ) }}", nil), compileError: "consumerRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := CompileClaimPolicy(tc.policy)
			if tc.compileError != "" {
				if p.Err == nil || !strings.Contains(p.Err.Error(), tc.compileError) {
					t.Fatalf("compile error %v, want one with %q", p.Err, tc.compileError)
				}
				if p.Active() {
					t.Fatal("a policy that does not compile is active")
				}
				return
			}
			if p.Err != nil {
				t.Fatal(p.Err)
			}
			if p.ReadsVars() != tc.readsVars {
				t.Fatalf("ReadsVars %v, want %v", p.ReadsVars(), tc.readsVars)
			}
			vars := Vars{}
			if p.ReadsVars() {
				vars = Vars{Trigger: tc.object, User: user}
			}
			got, ok, err := p.Plan(vars, trigger, tc.consumers)
			if err != nil {
				t.Fatal(err)
			}
			if !p.ReadsVars() {
				// What it would plan from the object's variables is the same.
				full, fullOK, err := p.Plan(Vars{Trigger: tc.object, User: user}, trigger, tc.consumers)
				if err != nil || fullOK != ok || full.Consumer != got.Consumer || !maps.Equal(full.Annotations, got.Annotations) {
					t.Fatalf("planned from the variables: %+v %v %v, without: %+v %v", full, fullOK, err, got, ok)
				}
			}
			if ok != tc.match {
				t.Fatalf("matched %v, want %v", ok, tc.match)
			}
			if !ok {
				return
			}
			if got.Consumer != tc.consumer || got.Name != ClaimName("premium", "uid-1") {
				t.Fatalf("plan %+v", got)
			}
			obj := got.Object()
			if obj.Annotations["note"] != tc.annotation || obj.Annotations[TriggerUIDAnnotation] != "uid-1" || obj.Labels[quotav1alpha1.PolicyLabel] != "premium" {
				t.Fatalf("claim metadata %+v", obj.ObjectMeta)
			}
		})
	}
}

func TestGrantPolicies(t *testing.T) {
	p := CompileGrantPolicy(&quotav1alpha1.GrantCreationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "starter"},
		Spec: quotav1alpha1.GrantCreationPolicySpec{
			Trigger: quotav1alpha1.GrantTriggerSpec{Resource: quotav1alpha1.GrantTriggerResource{APIVersion: "resourcemanager.miloapis.com/v1alpha1", Kind: "Project"},
				Constraints: []quotav1alpha1.ConditionExpression{{Expression: `trigger.metadata.labels["plan"] == "starter"`}}},
			Target: quotav1alpha1.GrantTargetSpec{ResourceGrantTemplate: quotav1alpha1.ResourceGrantTemplate{
				Spec: quotav1alpha1.ResourceGrantSpec{Allowances: []quotav1alpha1.Allowance{{ResourceType: NamespacesPerProject, Buckets: []quotav1alpha1.Bucket{{Amount: 3}}}}}}}}})
	if p.Err != nil {
		t.Fatal(p.Err)
	}
	web := map[string]any{"metadata": map[string]any{"name": "web", "labels": map[string]any{"plan": "starter"}}}
	g, ok, err := p.Plan(web, Consumer{KindProject, "web"})
	if err != nil || !ok || g.Name != "starter-project-web" || g.Consumer != (Consumer{KindProject, "web"}) || g.Allowances[0].Buckets[0].Amount != 3 {
		t.Fatalf("plan %+v %v %v", g, ok, err)
	}
	if _, ok, _ := p.Plan(map[string]any{"metadata": map[string]any{"name": "x", "labels": map[string]any{"plan": "pro"}}}, Consumer{KindProject, "x"}); ok {
		t.Fatal("the policy matched a project of another plan")
	}
	bad := CompileGrantPolicy(&quotav1alpha1.GrantCreationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec: quotav1alpha1.GrantCreationPolicySpec{Trigger: quotav1alpha1.GrantTriggerSpec{Resource: quotav1alpha1.GrantTriggerResource{APIVersion: "v1", Kind: "ConfigMap"}}}})
	if bad.Err == nil {
		t.Fatal("a grant policy for ConfigMaps compiled")
	}
}
