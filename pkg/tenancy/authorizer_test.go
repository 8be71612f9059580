package tenancy

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func TestParentExtrasReachTheAuthorizer(t *testing.T) {
	var seen user.Info
	inner := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		seen = a.GetUser()
		return authorizer.DecisionAllow, "", nil
	})
	authz := WithParentExtras(inner)
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"dev"}, Extra: map[string][]string{
		"scopes": {"x"}, ExtraParentName: {"forged"},
	}}
	attrs := authorizer.AttributesRecord{User: alice, Verb: "get", Resource: "configmaps", ResourceRequest: true}

	if _, _, err := authz.Authorize(WithTenant(context.Background(), ProjectTenant("web")), attrs); err != nil {
		t.Fatal(err)
	}
	extra := seen.GetExtra()
	if got := extra[ExtraParentName]; len(got) != 1 || got[0] != "web" {
		t.Errorf("parent-name %v, want [web]", got)
	}
	if got := extra[ExtraParentType]; len(got) != 1 || got[0] != "Project" {
		t.Errorf("parent-type %v", got)
	}
	if got := extra[ExtraParentAPIGroup]; len(got) != 1 || got[0] != "resourcemanager.miloapis.com" {
		t.Errorf("parent-api-group %v", got)
	}
	if seen.GetName() != "alice" || len(extra["scopes"]) != 1 || seen.GetGroups()[0] != "dev" {
		t.Errorf("the rest of the user changed: %+v", seen)
	}
	if alice.Extra[ExtraParentName][0] != "forged" {
		t.Error("the caller's user was modified")
	}

	if _, _, err := authz.Authorize(context.Background(), attrs); err != nil {
		t.Fatal(err)
	}
	if seen != alice {
		t.Error("platform requests must reach the authorizer unchanged")
	}
}
