// Package projectrbac authorizes a project's requests with the Kubernetes RBAC
// objects stored in that project.
//
// Roles, RoleBindings, ClusterRoles and ClusterRoleBindings created inside a
// project apply only inside it. They are read through the RBAC storage with the
// project in the context — from the shared watch caches, tenant-keyed like
// everything else — so there is no informer, lister or cache per project.
//
// For a project request the decision is, in order:
//
//  1. members of system:masters are allowed (platform superusers);
//  2. the project's own RBAC;
//  3. the platform's ClusterRoleBindings (platform-wide grants, such as discovery
//     for every authenticated user). The platform's namespaced RoleBindings do not
//     apply: a platform namespace is not a project's namespace of the same name.
//
// Platform requests go to the upstream authorizer chain unchanged.
package projectrbac

import (
	"context"
	"errors"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/tenantstate"
)

// Storage reads a tenant's RBAC objects through the server's RBAC storages.
type Storage struct {
	tenant *tenantstate.Reader
	// platformClusterRoles backs ClusterRoles a project does not define itself, so
	// bindings in a project can name the platform's admin, edit, view and cluster-admin.
	platformClusterRoles rbaclisters.ClusterRoleLister
}

// NewStorage reads RBAC objects through tenant.
func NewStorage(tenant *tenantstate.Reader) *Storage { return &Storage{tenant: tenant} }

var (
	rolesResource               = rbacv1.Resource("roles")
	roleBindingsResource        = rbacv1.Resource("rolebindings")
	clusterRolesResource        = rbacv1.Resource("clusterroles")
	clusterRoleBindingsResource = rbacv1.Resource("clusterrolebindings")
)

// get and list read from the watch cache: authorization runs on every request.
func (s *Storage) get(ctx context.Context, gr schema.GroupResource, namespace, name string, out runtime.Object) error {
	obj, err := s.tenant.Get(ctx, gr, namespace, name, tenantstate.FromCache)
	if err != nil {
		return err
	}
	return legacyscheme.Scheme.Convert(obj, out, nil)
}

func (s *Storage) list(ctx context.Context, gr schema.GroupResource, namespace string, each func(runtime.Object) error) error {
	list, err := s.tenant.List(ctx, gr, namespace)
	if err != nil {
		return err
	}
	return meta.EachListItem(list, each)
}

// GetRole implements the RBAC authorizer's RoleGetter for the context's tenant.
func (s *Storage) GetRole(ctx context.Context, namespace, name string) (*rbacv1.Role, error) {
	out := &rbacv1.Role{}
	return out, s.get(ctx, rolesResource, namespace, name, out)
}

// GetClusterRole implements ClusterRoleGetter for the context's tenant: the
// project's own ClusterRole of that name, else the platform's.
func (s *Storage) GetClusterRole(ctx context.Context, name string) (*rbacv1.ClusterRole, error) {
	out := &rbacv1.ClusterRole{}
	err := s.get(ctx, clusterRolesResource, "", name, out)
	if apierrors.IsNotFound(err) && s.platformClusterRoles != nil {
		return s.platformClusterRoles.Get(name)
	}
	return out, err
}

// ListRoleBindings implements RoleBindingLister for the context's tenant.
func (s *Storage) ListRoleBindings(ctx context.Context, namespace string) ([]*rbacv1.RoleBinding, error) {
	var out []*rbacv1.RoleBinding
	err := s.list(ctx, roleBindingsResource, namespace, func(obj runtime.Object) error {
		rb := &rbacv1.RoleBinding{}
		if err := legacyscheme.Scheme.Convert(obj, rb, nil); err != nil {
			return err
		}
		out = append(out, rb)
		return nil
	})
	return out, err
}

// ListClusterRoleBindings implements ClusterRoleBindingLister for the context's tenant.
func (s *Storage) ListClusterRoleBindings(ctx context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	var out []*rbacv1.ClusterRoleBinding
	err := s.list(ctx, clusterRoleBindingsResource, "", func(obj runtime.Object) error {
		crb := &rbacv1.ClusterRoleBinding{}
		if err := legacyscheme.Scheme.Convert(obj, crb, nil); err != nil {
			return err
		}
		out = append(out, crb)
		return nil
	})
	return out, err
}

// PlatformListers are the platform's RBAC listers (the server's shared informers).
type PlatformListers struct {
	ClusterRoles        rbaclisters.ClusterRoleLister
	ClusterRoleBindings rbaclisters.ClusterRoleBindingLister
}

// noRoleBindings keeps the platform's namespaced bindings out of project decisions.
type noRoleBindings struct{}

func (noRoleBindings) ListRoleBindings(context.Context, string) ([]*rbacv1.RoleBinding, error) {
	return nil, nil
}

// noRoles answers for the platform's namespaced roles, which no binding used here can name.
type noRoles struct{}

func (noRoles) GetRole(context.Context, string, string) (*rbacv1.Role, error) {
	return nil, fmt.Errorf("platform roles do not apply in projects")
}

// Authorizer decides project requests as described in the package comment and
// hands platform and all-projects requests to the platform's chain. It also
// lists rules (SelfSubjectRulesReview) the same way.
type Authorizer struct {
	platform      authorizer.Authorizer
	platformRules authorizer.RuleResolver
	projectRBAC   *rbac.RBACAuthorizer
	platformWide  *rbac.RBACAuthorizer
	storage       *Storage
	members       Members
	// platformBindings tell who the platform's operators are.
	platformBindings rbaclisters.ClusterRoleBindingLister
}

var (
	_ authorizer.Authorizer   = &Authorizer{}
	_ authorizer.RuleResolver = &Authorizer{}
)

// New returns the authorizer over the platform's chain (platform, and its
// rule resolver platformRules, which may be nil) and the project storage.
// members tells who holds IAM grants in a project or organization.
func New(platform authorizer.Authorizer, platformRules authorizer.RuleResolver, project *Storage, listers PlatformListers, members Members) *Authorizer {
	project.platformClusterRoles = listers.ClusterRoles
	return &Authorizer{
		platform:         platform,
		platformRules:    platformRules,
		storage:          project,
		members:          members,
		platformBindings: listers.ClusterRoleBindings,
		projectRBAC:      rbac.New(project, project, project, project),
		platformWide: rbac.New(noRoles{}, noRoleBindings{},
			&rbac.ClusterRoleGetter{Lister: listers.ClusterRoles}, &rbac.ClusterRoleBindingLister{Lister: listers.ClusterRoleBindings}),
	}
}

func superuser(u user.Info) bool {
	if u == nil {
		return false
	}
	for _, g := range u.GetGroups() {
		if g == user.SystemPrivilegedGroup {
			return true
		}
	}
	return false
}

// notAMember is the reason given to whoever has no foothold in a project or
// organization, whether or not it exists: it names neither.
const notAMember = "no access to this project or organization"

// Authorize implements authorizer.Authorizer.
func (z *Authorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	t := tenancy.From(ctx)
	switch {
	case !a.IsResourceRequest() && tenancy.ProcessWide(a.GetPath()):
		// Version and health are the server's, the same in every context.
		return z.platformWide.Authorize(tenancy.WithTenant(ctx, tenancy.PlatformTenant), a)
	case t.Kind == tenancy.Organization:
		// The platform's grants apply in an organization's context only to
		// those IAM lets in there (IAM, first in the chain, has decided what
		// it grants itself).
		if !superuser(a.GetUser()) && (z.members == nil || a.GetUser() == nil || !z.members.HasGrants(ctx, a.GetUser())) {
			return authorizer.DecisionDeny, notAMember, nil
		}
		return z.platform.Authorize(ctx, a)
	case !t.IsProject():
		return z.platform.Authorize(ctx, a)
	}
	if superuser(a.GetUser()) {
		return authorizer.DecisionAllow, "platform superuser", nil
	}
	if d, reason, err := z.projectRBAC.Authorize(ctx, a); d == authorizer.DecisionAllow {
		return d, "project RBAC: " + reason, err
	}
	if !z.member(ctx, a.GetUser()) {
		return authorizer.DecisionDeny, notAMember, nil
	}
	// The platform's ClusterRoleBindings are read without a tenant.
	return z.platformWide.Authorize(tenancy.WithTenant(ctx, tenancy.PlatformTenant), a)
}

// RulesFor implements authorizer.RuleResolver: in a project, the rules of the
// project's RBAC and of the platform's ClusterRoleBindings.
func (z *Authorizer) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	if !tenancy.From(ctx).IsProject() {
		if z.platformRules == nil {
			return nil, nil, true, nil
		}
		return z.platformRules.RulesFor(ctx, u, namespace)
	}
	if superuser(u) {
		return []authorizer.ResourceRuleInfo{&authorizer.DefaultResourceRuleInfo{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
			[]authorizer.NonResourceRuleInfo{&authorizer.DefaultNonResourceRuleInfo{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}, false, nil
	}
	resources, nonResources, incomplete, err := z.projectRBAC.RulesFor(ctx, u, namespace)
	r2, n2, incomplete2, err2 := z.platformWide.RulesFor(tenancy.WithTenant(ctx, tenancy.PlatformTenant), u, namespace)
	return append(resources, r2...), append(nonResources, n2...), incomplete || incomplete2, errors.Join(err, err2)
}
