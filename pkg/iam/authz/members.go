package authz

import (
	"context"

	"k8s.io/apiserver/pkg/authentication/user"
)

// HasGrants reports whether IAM grants u anything in the project or
// organization of the request: what lets a user in there at all.
func (z *Authorizer) HasGrants(ctx context.Context, u user.Info) bool {
	rules, _, _, err := z.RulesFor(ctx, u, "")
	return err == nil && len(rules) > 0
}
