package tenantstorage

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"

	"go.miloapis.com/milo/pkg/tenancy"
)

// DefaultMaxListItems is the default bound on one tenant LIST (see boundedList).
const DefaultMaxListItems = 5000

// listBounded tells whether a LIST is a tenant's, and so bounded: a LIST
// request of a project or an organization context by anyone but the
// platform's superusers (system:masters, whose controllers list namespaces
// whole to empty them). The server's own reads are not bounded: those without
// a request, and those it makes while serving one (ServerRead).
func listBounded(ctx context.Context) bool {
	if t := tenancy.From(ctx); t.Kind == tenancy.Platform || t.Kind == tenancy.AllProjects || ctx.Value(serverReadKey{}) != nil {
		return false
	}
	if info, ok := request.RequestInfoFrom(ctx); !ok || info.Verb != "list" {
		return false
	}
	u, ok := request.UserFrom(ctx)
	return ok && !slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

type serverReadKey struct{}

// ServerRead marks ctx as a read the server makes for itself while it serves
// a request (authorization, admission): the request's tenant and user stay in
// ctx, but the bounds on what a tenant may list do not apply.
func ServerRead(ctx context.Context) context.Context {
	return context.WithValue(ctx, serverReadKey{}, true)
}

// boundedList serves a tenant's LIST with at most max items, so that one
// request of one tenant costs the server a bounded amount of memory and time:
//
//   - a page larger than max (limit > max) is cut to max items with a
//     continue token, as the API allows any server to;
//   - a list at resourceVersion 0, which the watch cache would build whole
//     whatever its limit, is read at the current resourceVersion instead
//     (which satisfies "any", what 0 asks for), so that limits hold;
//   - a LIST without a limit that would hold more than max items is refused
//     (400) rather than cut short, since a client that did not ask for pages
//     would not follow a continue token and would take the first page for
//     the whole. kubectl and client-go's informers always ask for pages.
//
// Without a limit the list is read with one (max+1 items), so even a refused
// list is never built whole; a resourceVersion the client gave keeps its
// meaning ("not older than", which a limit would otherwise turn into "exactly").
func (s *store) boundedList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	max := s.maxListItems
	asked := opts.Predicate.Limit
	if opts.ResourceVersion == "0" {
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	}
	switch {
	case asked <= 0:
		opts.Predicate.Limit = max + 1
		if opts.ResourceVersion != "" && opts.ResourceVersionMatch == "" {
			opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		}
	case asked > max:
		opts.Predicate.Limit = max
	}
	if err := s.Interface.GetList(ctx, key, opts, listObj); err != nil {
		return err
	}
	if asked > 0 {
		return nil
	}
	list, err := meta.ListAccessor(listObj)
	if err != nil {
		return err
	}
	if int64(meta.LenList(listObj)) > max || list.GetContinue() != "" {
		return apierrors.NewBadRequest(fmt.Sprintf("the list of %s holds more than %d items, the most one list of a project may return: "+
			"ask for it in pages (limit and continue), as kubectl and client-go's informers do", s.resource.String(), max))
	}
	return nil
}
