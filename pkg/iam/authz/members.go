package authz

import (
	"context"

	"k8s.io/apiserver/pkg/authentication/user"
)

// HasGrants reports whether IAM grants u anything in the project or
// organization of the request: what lets a user in there at all.
func (z *Authorizer) HasGrants(ctx context.Context, u user.Info) bool {
	target, ok := rulesTarget(ctx, u)
	return ok && z.iam.GrantsAny(u.GetName(), u.GetGroups(), target, z.missingAncestry(ctx, target))
}
