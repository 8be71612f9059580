package projectrbac

import (
	"context"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Members tells whether a user holds any grant in the request's project or
// organization context other than the project's own RBAC: Milo IAM's.
type Members interface {
	HasGrants(ctx context.Context, u user.Info) bool
}

// member reports whether u has a foothold in the project of ctx: the
// project's own service accounts, anyone an IAM grant reaches there, anyone a
// binding stored in the project names, and the platform's operators (named by
// a platform ClusterRoleBinding other than through a group every user or
// service account is in). The platform's broad grants (discovery, access
// reviews for every authenticated user) apply only to members, so that an
// outsider gets one answer for an existing project and a missing one.
func (z *Authorizer) member(ctx context.Context, u user.Info) bool {
	if u == nil {
		return false
	}
	if _, _, err := serviceaccount.SplitUsername(u.GetName()); err == nil {
		// Inside a project a service account is always the project's own.
		return true
	}
	if z.members != nil && z.members.HasGrants(ctx, u) {
		return true
	}
	return z.platformOperator(u) || z.boundInProject(ctx, u)
}

// everyone are the groups that name no one in particular: a platform binding
// to them is a grant to all, not a mark of an operator.
var everyone = map[string]bool{user.AllAuthenticated: true, user.AllUnauthenticated: true, serviceaccount.AllServiceAccountsGroup: true}

// platformOperator reports whether a platform ClusterRoleBinding names u
// itself or one of its groups other than everyone's.
func (z *Authorizer) platformOperator(u user.Info) bool {
	if z.platformBindings == nil {
		return false
	}
	bindings, err := z.platformBindings.List(labels.Everything())
	if err != nil {
		return false
	}
	for _, b := range bindings {
		for _, s := range b.Subjects {
			if (s.Kind == rbacv1.UserKind && s.Name == u.GetName()) ||
				(s.Kind == rbacv1.GroupKind && !everyone[s.Name] && slices.Contains(u.GetGroups(), s.Name)) {
				return true
			}
		}
	}
	return false
}

// boundInProject reports whether a RoleBinding or ClusterRoleBinding stored
// in the project names u, read from the shared watch caches.
func (z *Authorizer) boundInProject(ctx context.Context, u user.Info) bool {
	crbs, err := z.storage.ListClusterRoleBindings(ctx)
	if err == nil {
		for _, b := range crbs {
			if names(b.Subjects, "", u) {
				return true
			}
		}
	}
	rbs, err := z.storage.ListRoleBindings(ctx, "")
	if err == nil {
		for _, b := range rbs {
			if names(b.Subjects, b.Namespace, u) {
				return true
			}
		}
	}
	return false
}

// names reports whether one of subjects is u, as the RBAC authorizer matches them.
func names(subjects []rbacv1.Subject, bindingNamespace string, u user.Info) bool {
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			if s.Name == u.GetName() {
				return true
			}
		case rbacv1.GroupKind:
			if slices.Contains(u.GetGroups(), s.Name) {
				return true
			}
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = bindingNamespace
			}
			if serviceaccount.MakeUsername(ns, s.Name) == u.GetName() {
				return true
			}
		}
	}
	return false
}
