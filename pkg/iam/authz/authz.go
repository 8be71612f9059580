// Package authz puts Milo IAM into the API server's authorization chain: it
// feeds the evaluator from shared informers and turns each request's
// attributes into an evaluator question.
package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"go.miloapis.com/milo/pkg/iam/evaluator"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Authorizer allows what a PolicyBinding grants and has no opinion otherwise,
// so that the rest of the chain (the project's own RBAC, the platform's RBAC,
// an external webhook) decides what Milo IAM does not grant.
//
// What it decides about:
//   - every resource request inside a project: the object it names, if any
//     (bindings whose resourceRef names a project), then the project;
//   - every resource request in an organization's context: the organization,
//     or the Folder or Project the request names;
//   - at the platform, requests that name an Organization, Folder or Project.
//
// A project's service accounts (the only service accounts a project request
// can authenticate as) are left to the project's RBAC.
//
// Requests to the all-projects view and non-resource requests are left to
// the rest of the chain: the all-projects view is for platform identities.
type Authorizer struct {
	iam     *evaluator.Evaluator
	parents ParentLookup
}

// ParentLookup finds the parent of a Folder or Project the evaluator does not
// know yet (created a moment ago, not yet seen by its informer).
type ParentLookup func(ctx context.Context, isFolder bool, name string) (kind, parent string, found bool, err error)

var (
	_ authorizer.Authorizer   = &Authorizer{}
	_ authorizer.RuleResolver = &Authorizer{}
)

// New returns Milo IAM's authorizer over the evaluator; parents, if given,
// answers for hierarchy objects the evaluator has not seen yet, so that a
// project can be used the moment it exists.
func New(e *evaluator.Evaluator, parents ParentLookup) *Authorizer {
	return &Authorizer{iam: e, parents: parents}
}

// missingAncestry reads, for this decision only, the ancestry of a Folder or
// Project the evaluator does not know yet (created a moment ago). Its
// informers tell it within moments; until then a grant on an ancestor would
// not reach the new object. Nothing is written into the evaluator: its index
// follows the informers only, so no answer read here can outlive the object.
func (z *Authorizer) missingAncestry(ctx context.Context, n evaluator.Node) []evaluator.Edge {
	var edges []evaluator.Edge
	for range 10 { // a project and up to eight folders
		isFolder := n.Resource == "folders"
		if z.parents == nil || n.Group != evaluator.ResourceManagerGroup || (!isFolder && n.Resource != "projects") || z.iam.HasParent(n) {
			return edges
		}
		kind, name, found, err := z.parents(ctx, isFolder, n.Name)
		if err != nil || !found {
			return edges
		}
		parent := evaluator.Organization(name)
		if kind == "Folder" {
			parent = evaluator.Folder(name)
		}
		edges = append(edges, evaluator.Edge{Child: n, Parent: parent})
		n = parent
	}
	return edges
}

// projectServiceAccount: a project's service accounts are the project's own
// business, its RBAC decides. Their names repeat across projects, so no
// binding of an organization could tell them apart.
func projectServiceAccount(t tenancy.Tenant, u user.Info) bool {
	return t.IsProject() && strings.HasPrefix(u.GetName(), serviceaccount.ServiceAccountUsernamePrefix)
}

// Authorize implements authorizer.Authorizer.
func (z *Authorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !a.IsResourceRequest() || a.GetUser() == nil || slices.Contains(a.GetUser().GetGroups(), user.SystemPrivilegedGroup) {
		// Superusers are allowed further down the chain; the server's own
		// reads of the hierarchy (missingAncestry) are theirs, so IAM must not
		// look at them again.
		return authorizer.DecisionNoOpinion, "", nil
	}
	t := tenancy.From(ctx)
	if projectServiceAccount(t, a.GetUser()) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	target, ok := targetOf(t, a)
	if !ok {
		return authorizer.DecisionNoOpinion, "", nil
	}
	start := time.Now()
	resource := a.GetResource()
	if sub := a.GetSubresource(); sub != "" {
		resource += "/" + sub
	}
	req := evaluator.Request{
		User:       a.GetUser().GetName(),
		Groups:     a.GetUser().GetGroups(),
		Permission: evaluator.Permission{Group: a.GetAPIGroup(), Resource: resource, Verb: a.GetVerb()},
		Target:     target,
		Ancestry:   z.missingAncestry(ctx, target),
	}
	if t.IsProject() && a.GetName() != "" {
		req.Object = evaluator.ProjectObject(t.Name, a.GetAPIGroup(), a.GetResource(), a.GetNamespace(), a.GetName())
	}
	allowed, binding := z.iam.Allowed(req)
	if !allowed {
		decisionDuration.WithLabelValues("no_opinion").Observe(time.Since(start).Seconds())
		return authorizer.DecisionNoOpinion, "", nil
	}
	decisionDuration.WithLabelValues("allowed").Observe(time.Since(start).Seconds())
	return authorizer.DecisionAllow, fmt.Sprintf("Milo IAM: PolicyBinding %s", binding), nil
}

// RulesFor lists what IAM grants the user in a project (on the project and
// its ancestors) or in an organization's context (on the organization), as
// rules, for SelfSubjectRulesReview (kubectl auth can-i --list). At the
// platform IAM grants only on named objects, which rules do not list.
func (z *Authorizer) RulesFor(ctx context.Context, u user.Info, _ string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	target, ok := rulesTarget(ctx, u)
	if !ok {
		return nil, nil, false, nil
	}
	type groupResource struct{ group, resource string }
	verbs := map[groupResource][]string{}
	var order []groupResource
	for _, p := range z.iam.Permissions(u.GetName(), u.GetGroups(), target, z.missingAncestry(ctx, target)) {
		k := groupResource{p.Group, p.Resource}
		if _, seen := verbs[k]; !seen {
			order = append(order, k)
		}
		verbs[k] = append(verbs[k], p.Verb)
	}
	rules := make([]authorizer.ResourceRuleInfo, 0, len(order))
	for _, k := range order {
		rules = append(rules, &authorizer.DefaultResourceRuleInfo{APIGroups: []string{k.group}, Resources: []string{k.resource}, Verbs: verbs[k]})
	}
	return rules, nil, false, nil
}

// rulesTarget is the node whose grants RulesFor lists for u in the
// request's context, if IAM grants anything there: a project's own service
// accounts get their permissions from the project's RBAC only.
func rulesTarget(ctx context.Context, u user.Info) (evaluator.Node, bool) {
	t := tenancy.From(ctx)
	switch {
	case u == nil || projectServiceAccount(t, u):
		return evaluator.Node{}, false
	case t.IsProject():
		return evaluator.Project(t.Name), true
	case t.Kind == tenancy.Organization:
		return evaluator.Organization(t.Name), true
	}
	return evaluator.Node{}, false
}

func targetOf(t tenancy.Tenant, a authorizer.Attributes) (evaluator.Node, bool) {
	named := hierarchyNode(a)
	switch t.Kind {
	case tenancy.Project:
		return evaluator.Project(t.Name), true
	case tenancy.Organization:
		if named != nil {
			return *named, true
		}
		return evaluator.Organization(t.Name), true
	case tenancy.Platform:
		if named != nil {
			return *named, true
		}
	}
	return evaluator.Node{}, false
}

// hierarchyNode is the Organization, Folder or Project a request names, if any.
func hierarchyNode(a authorizer.Attributes) *evaluator.Node {
	if a.GetAPIGroup() != evaluator.ResourceManagerGroup || a.GetName() == "" {
		return nil
	}
	var n evaluator.Node
	switch a.GetResource() {
	case "organizations":
		n = evaluator.Organization(a.GetName())
	case "folders":
		n = evaluator.Folder(a.GetName())
	case "projects":
		n = evaluator.Project(a.GetName())
	default:
		return nil
	}
	return &n
}
