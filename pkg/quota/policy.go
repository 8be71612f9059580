package quota

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apimachinery/pkg/runtime/schema"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
)

// costLimit bounds what one expression may cost at admission: a policy's
// expressions run on every matching create.
const costLimit = 100000

// Vars are what a policy's expressions read: the object (trigger), who
// creates it (user) and the request (requestInfo).
type Vars struct {
	Trigger     map[string]any
	User        map[string]any
	RequestInfo map[string]any
}

func (v Vars) activation() map[string]any {
	empty := map[string]any{}
	out := map[string]any{"trigger": v.Trigger, "user": v.User, "requestInfo": v.RequestInfo}
	for k, val := range out {
		if m, _ := val.(map[string]any); m == nil {
			out[k] = empty
		}
	}
	return out
}

var celEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("trigger", cel.DynType),
		cel.Variable("user", cel.DynType),
		cel.Variable("requestInfo", cel.DynType),
	)
	if err != nil {
		panic(err)
	}
	return env
}()

func compile(expr string, want *cel.Type) (cel.Program, error) {
	ast, iss := celEnv.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.DynType && !ast.OutputType().IsExactType(want) {
		return nil, fmt.Errorf("%q is %s, not %s", expr, ast.OutputType(), want)
	}
	return celEnv.Program(ast, cel.CostLimit(costLimit))
}

// template is a string with {{ expression }} parts.
type template struct {
	literal []string      // len(exprs)+1 literal pieces around the expressions
	exprs   []cel.Program // string-valued
}

var templateExpr = regexp.MustCompile(`\{\{(.*?)\}\}`)

func compileTemplate(s string) (*template, error) {
	t := &template{}
	last := 0
	for _, m := range templateExpr.FindAllStringSubmatchIndex(s, -1) {
		p, err := compile(strings.TrimSpace(s[m[2]:m[3]]), cel.StringType)
		if err != nil {
			return nil, err
		}
		t.literal = append(t.literal, s[last:m[0]])
		t.exprs = append(t.exprs, p)
		last = m[1]
	}
	t.literal = append(t.literal, s[last:])
	return t, nil
}

func (t *template) render(vars map[string]any) (string, error) {
	if t == nil {
		return "", nil
	}
	var b strings.Builder
	for i, p := range t.exprs {
		b.WriteString(t.literal[i])
		v, _, err := p.Eval(vars)
		if err != nil {
			return "", err
		}
		s, ok := v.(types.String)
		if !ok {
			return "", fmt.Errorf("template expression gave %s, not a string", v.Type())
		}
		b.WriteString(string(s))
	}
	b.WriteString(t.literal[len(t.literal)-1])
	return b.String(), nil
}

// condition is a compiled constraint.
type condition struct {
	program cel.Program
	source  string
}

func compileConditions(cs []quotav1alpha1.ConditionExpression) ([]condition, error) {
	out := make([]condition, 0, len(cs))
	for i, c := range cs {
		p, err := compile(c.Expression, cel.BoolType)
		if err != nil {
			return nil, fmt.Errorf("constraints[%d]: %w", i, err)
		}
		out = append(out, condition{program: p, source: c.Expression})
	}
	return out, nil
}

// holds reports whether every condition is true.
func holds(cs []condition, vars map[string]any) (bool, error) {
	for _, c := range cs {
		v, _, err := c.program.Eval(vars)
		if err != nil {
			return false, fmt.Errorf("%s: %w", c.source, err)
		}
		if b, ok := v.(types.Bool); !ok || !bool(b) {
			if !ok {
				return false, fmt.Errorf("%s gave %v, not a bool", c.source, refType(v))
			}
			return false, nil
		}
	}
	return true, nil
}

func refType(v ref.Val) string {
	if v == nil {
		return "nothing"
	}
	return v.Type().TypeName()
}

// ClaimPolicy is a compiled ClaimCreationPolicy.
type ClaimPolicy struct {
	Name    string
	Trigger schema.GroupKind
	// TriggerVersion is the version the trigger names.
	TriggerVersion string
	// Err, when set, is why the policy is not applied (its Ready condition).
	Err         error
	Disabled    bool
	conditions  []condition
	consumer    consumerTemplate
	requests    []quotav1alpha1.ResourceRequest
	labels      map[string]string
	annotations map[string]*template
	// readsVars: some expression of the policy reads its Vars. A policy
	// without one plans from no Vars, so a create it charges is not
	// converted for CEL.
	readsVars bool
}

type consumerTemplate struct {
	kind, name *template
}

// compileTrigger parses a policy's trigger kind and compiles its constraints.
func compileTrigger(apiVersion, kind string, constraints []quotav1alpha1.ConditionExpression) (schema.GroupVersionKind, []condition, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("spec.trigger.resource.apiVersion: %w", err)
	}
	conditions, err := compileConditions(constraints)
	if err != nil {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("spec.trigger.%w", err)
	}
	return gv.WithKind(kind), conditions, nil
}

// compileConsumer compiles the templates of a consumer reference (empty: the object's own).
func compileConsumer(ref quotav1alpha1.ConsumerRef) (consumerTemplate, error) {
	var c consumerTemplate
	var err error
	if c.kind, err = compileTemplate(ref.Kind); err == nil {
		c.name, err = compileTemplate(ref.Name)
	}
	return c, err
}

// CompileClaimPolicy compiles p; a policy that does not compile has Err set.
// p may be an informer's object: the policy shares its requests and labels,
// which neither it nor its users change.
func CompileClaimPolicy(p *quotav1alpha1.ClaimCreationPolicy) *ClaimPolicy {
	out := &ClaimPolicy{Name: p.Name, Disabled: p.Spec.Disabled != nil && *p.Spec.Disabled}
	var gvk schema.GroupVersionKind
	var err error
	if gvk, out.conditions, err = compileTrigger(p.Spec.Trigger.Resource.APIVersion, p.Spec.Trigger.Resource.Kind, p.Spec.Trigger.Constraints); err != nil {
		out.Err = err
		return out
	}
	out.Trigger, out.TriggerVersion = gvk.GroupKind(), gvk.Version
	tmpl := p.Spec.Target.ResourceClaimTemplate
	if out.consumer, err = compileConsumer(tmpl.Spec.ConsumerRef); err != nil {
		out.Err = fmt.Errorf("spec.target.resourceClaimTemplate.spec.consumerRef: %w", err)
		return out
	}
	seen := map[string]bool{}
	for _, r := range tmpl.Spec.Requests {
		if seen[r.ResourceType] {
			out.Err = fmt.Errorf("spec.target.resourceClaimTemplate.spec.requests: %q appears twice", r.ResourceType)
			return out
		}
		seen[r.ResourceType] = true
	}
	out.requests = tmpl.Spec.Requests
	out.labels = tmpl.Metadata.Labels
	out.annotations = map[string]*template{}
	for k, v := range tmpl.Metadata.Annotations {
		if out.annotations[k], err = compileTemplate(v); err != nil {
			out.Err = fmt.Errorf("spec.target.resourceClaimTemplate.metadata.annotations[%s]: %w", k, err)
			return out
		}
	}
	templates := []*template{out.consumer.kind, out.consumer.name}
	for _, t := range out.annotations {
		templates = append(templates, t)
	}
	out.readsVars = len(out.conditions) > 0 || hasExprs(templates...)
	return out
}

// Active reports whether the policy creates claims.
func (p *ClaimPolicy) Active() bool { return p.Err == nil && !p.Disabled }

// ReadsVars reports whether any of the policy's expressions (constraints,
// consumer, annotations) reads its Vars: without one, Plan needs none.
func (p *ClaimPolicy) ReadsVars() bool { return p.readsVars }

// hasExprs reports whether any template holds an expression.
func hasExprs(ts ...*template) bool {
	for _, t := range ts {
		if t != nil && len(t.exprs) > 0 {
			return true
		}
	}
	return false
}

// NamesConsumer reports whether the policy's template names its consumer
// (else the object's own is charged).
func (p *ClaimPolicy) NamesConsumer() bool {
	n, k := p.consumer.name, p.consumer.kind
	return (n != nil && (len(n.exprs) > 0 || n.literal[0] != "")) || (k != nil && len(k.exprs) > 0)
}

// ConsumerKind returns the kind the policy charges: its template's literal
// kind, or the kind the registration of its first request charges.
func (p *ClaimPolicy) ConsumerKind(c Consumers) string {
	if p.consumer.kind != nil && len(p.consumer.kind.exprs) == 0 && p.consumer.kind.literal[0] != "" {
		return p.consumer.kind.literal[0]
	}
	if len(p.requests) == 0 {
		return ""
	}
	return c.KindFor(p.requests[0].ResourceType)
}

// ResourceTypes returns the resource types the policy claims.
func (p *ClaimPolicy) ResourceTypes() []string {
	out := make([]string, 0, len(p.requests))
	for _, r := range p.requests {
		out = append(out, r.ResourceType)
	}
	return out
}

// Requests reports whether the policy claims resourceType.
func (p *ClaimPolicy) Requests(resourceType string) bool {
	for _, r := range p.requests {
		if r.ResourceType == resourceType {
			return true
		}
	}
	return false
}

// GrantPolicy is a compiled GrantCreationPolicy.
type GrantPolicy struct {
	Name       string
	Trigger    schema.GroupKind
	Err        error
	Disabled   bool
	conditions []condition
	consumer   consumerTemplate
	name       *template
	allowances []quotav1alpha1.Allowance
	labels     map[string]string
}

// CompileGrantPolicy compiles p; a policy that does not compile has Err set.
// p may be an informer's object: the policy shares its allowances and
// labels, which neither it nor its users change.
func CompileGrantPolicy(p *quotav1alpha1.GrantCreationPolicy) *GrantPolicy {
	out := &GrantPolicy{Name: p.Name, Disabled: p.Spec.Disabled != nil && *p.Spec.Disabled}
	gvk, conditions, err := compileTrigger(p.Spec.Trigger.Resource.APIVersion, p.Spec.Trigger.Resource.Kind, p.Spec.Trigger.Constraints)
	if err != nil {
		out.Err = err
		return out
	}
	out.Trigger, out.conditions = gvk.GroupKind(), conditions
	if out.Trigger.Group != "resourcemanager.miloapis.com" || (out.Trigger.Kind != KindOrganization && out.Trigger.Kind != KindProject) {
		out.Err = fmt.Errorf("spec.trigger.resource: grants are created for Organizations and Projects (resourcemanager.miloapis.com), not %s", out.Trigger)
		return out
	}
	if p.Spec.Target.ParentContext != nil {
		out.Err = fmt.Errorf("spec.target.parentContext: Milo is one control plane; grants are created in it")
		return out
	}
	tmpl := p.Spec.Target.ResourceGrantTemplate
	if out.consumer, err = compileConsumer(tmpl.Spec.ConsumerRef); err == nil {
		out.name, err = compileTemplate(tmpl.Metadata.Name)
	}
	if err != nil {
		out.Err = fmt.Errorf("spec.target.resourceGrantTemplate: %w", err)
		return out
	}
	out.allowances = tmpl.Spec.Allowances
	out.labels = tmpl.Metadata.Labels
	return out
}

// Active reports whether the policy creates grants.
func (p *GrantPolicy) Active() bool { return p.Err == nil && !p.Disabled }

// PlannedGrant is a grant a policy gives a consumer.
type PlannedGrant struct {
	Name       string
	Consumer   Consumer
	Allowances []quotav1alpha1.Allowance
	Labels     map[string]string
}

// Plan evaluates the policy for trigger, an Organization or Project; ok is
// false when its constraints do not hold.
func (p *GrantPolicy) Plan(trigger map[string]any, triggerConsumer Consumer) (PlannedGrant, bool, error) {
	vars := Vars{Trigger: trigger}.activation()
	if ok, err := holds(p.conditions, vars); !ok || err != nil {
		return PlannedGrant{}, false, err
	}
	c := triggerConsumer
	kind, err := p.consumer.kind.render(vars)
	if err != nil {
		return PlannedGrant{}, false, err
	}
	name, err := p.consumer.name.render(vars)
	if err != nil {
		return PlannedGrant{}, false, err
	}
	if kind != "" {
		c.Kind = kind
	}
	if name != "" {
		c.Name = name
	}
	grantName, err := p.name.render(vars)
	if err != nil {
		return PlannedGrant{}, false, err
	}
	if grantName == "" {
		grantName = p.Name + "-" + strings.ToLower(c.Kind) + "-" + c.Name
	}
	labels := map[string]string{quotav1alpha1.AutoCreatedLabel: "true", quotav1alpha1.PolicyLabel: LabelValue(p.Name)}
	for k, v := range p.labels {
		labels[k] = v
	}
	return PlannedGrant{Name: grantName, Consumer: c, Allowances: p.allowances, Labels: labels}, true, nil
}
