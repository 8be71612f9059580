package tenancy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Impersonation inside a tenant context may name only that tenant's own
// identities. Whatever RBAC or IAM a tenant holds there (a project's own
// cluster-admin binding grants impersonate on everything, an organization
// owner's role is */*.*), it must never become a server identity: with
// system:masters or system:apiserver a tenant could remove server-owned
// finalizers, reach process-wide endpoints, or skip the checks that keep
// tenants apart.
//
// Allowed in a project: ordinary users and groups (their access there is what
// the project grants them), the project's own service accounts
// (system:serviceaccount:{namespace}:{name}, which inside a project always
// means the project's own) and their groups, system:authenticated, UIDs, and
// extra fields outside the reserved Kubernetes and Milo domains. In an
// organization context or the all-projects view: the same without service
// accounts, which there would be the platform's.
func checkImpersonation(h http.Header, t Tenant) error {
	for _, name := range h.Values(authenticationv1.ImpersonateUserHeader) {
		if err := impersonableUser(name, t); err != nil {
			return err
		}
	}
	for _, group := range h.Values(authenticationv1.ImpersonateGroupHeader) {
		if err := impersonableGroup(group, t); err != nil {
			return err
		}
	}
	for header := range h {
		key, ok := strings.CutPrefix(http.CanonicalHeaderKey(header), authenticationv1.ImpersonateUserExtraHeaderPrefix)
		if !ok {
			continue
		}
		if unescaped, err := url.PathUnescape(key); err == nil {
			key = unescaped
		}
		if reservedExtra(key) {
			return fmt.Errorf("impersonating the extra field %q is not allowed in %s", key, t)
		}
	}
	return nil
}

func impersonableUser(name string, t Tenant) error {
	if ns, sa, err := serviceaccount.SplitUsername(name); err == nil {
		if t.Kind == Project {
			return nil
		}
		return fmt.Errorf("impersonating service account %s/%s is not allowed in %s", ns, sa, t)
	}
	if strings.HasPrefix(name, "system:") {
		return fmt.Errorf("impersonating %q is not allowed in %s: system identities belong to the server", name, t)
	}
	return nil
}

func impersonableGroup(group string, t Tenant) error {
	switch {
	case group == user.AllAuthenticated:
		return nil
	case t.Kind == Project && (group == serviceaccount.AllServiceAccountsGroup || strings.HasPrefix(group, serviceaccount.ServiceAccountGroupPrefix)):
		return nil
	case strings.HasPrefix(group, "system:"):
		return fmt.Errorf("impersonating group %q is not allowed in %s: system groups belong to the server", group, t)
	}
	return nil
}

// reservedExtra reports whether an extra field key belongs to Kubernetes or
// Milo, whose authenticators and authorizers set and trust them.
func reservedExtra(key string) bool {
	domain, _, ok := strings.Cut(strings.ToLower(key), "/")
	if !ok {
		return false
	}
	for _, reserved := range []string{"kubernetes.io", "k8s.io", "miloapis.com"} {
		if domain == reserved || strings.HasSuffix(domain, "."+reserved) {
			return true
		}
	}
	return false
}
