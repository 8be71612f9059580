package tenancy

import (
	"context"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Extra keys that tell an authorizer which project a request is for. External
// authorization webhooks (for example an OpenFGA-backed one) rely on them.
const (
	ExtraParentAPIGroup = "iam.miloapis.com/parent-api-group"
	ExtraParentType     = "iam.miloapis.com/parent-type"
	ExtraParentName     = "iam.miloapis.com/parent-name"
)

// WithParentExtras wraps an authorizer so that every decision made for a
// project's or an organization's request sees it in the user's extra fields.
func WithParentExtras(inner authorizer.Authorizer) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		// Authorization runs after the audit event is begun and before a denial, so
		// denied requests carry their tenant too.
		AnnotateAudit(ctx)
		t := From(ctx)
		if (t.Kind != Project && t.Kind != Organization) || a.GetUser() == nil {
			return inner.Authorize(ctx, a)
		}
		return inner.Authorize(ctx, withUser{Attributes: a, user: userWithParent(a.GetUser(), t)})
	})
}

func userWithParent(u user.Info, t Tenant) user.Info {
	extra := make(map[string][]string, len(u.GetExtra())+3)
	for k, v := range u.GetExtra() {
		extra[k] = v
	}
	// The server's word wins over anything an authenticator passed through.
	extra[ExtraParentAPIGroup] = []string{"resourcemanager.miloapis.com"}
	extra[ExtraParentType] = []string{"Project"}
	if t.Kind == Organization {
		extra[ExtraParentType] = []string{"Organization"}
	}
	extra[ExtraParentName] = []string{t.Name}
	return &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: extra}
}

type withUser struct {
	authorizer.Attributes
	user user.Info
}

func (w withUser) GetUser() user.Info { return w.user }
