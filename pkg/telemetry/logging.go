package telemetry

import (
	"context"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/server/httplog"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/tenancy"
)

// LogKeys returns the log keys of ctx's tenant: project, organization, or the
// all-projects view; none at the platform.
func LogKeys(ctx context.Context) []any {
	switch t := tenancy.From(ctx); t.Kind {
	case tenancy.Project:
		return []any{"project", t.Name}
	case tenancy.Organization:
		return []any{"organization", t.Name}
	case tenancy.AllProjects:
		return []any{"view", t.Kind.View()}
	default:
		return nil
	}
}

// WithTenantLogger returns ctx with a logger that carries ctx's tenant, so that
// every contextual log line of the request names it.
func WithTenantLogger(ctx context.Context) context.Context {
	keys := LogKeys(ctx)
	if len(keys) == 0 {
		return ctx
	}
	return klog.NewContext(ctx, klog.FromContext(ctx).WithValues(keys...))
}

// RecordTenant wraps the server's authenticator so that the request's access
// log line (the apiserver's "HTTP" line, at -v=3) and its audit event name its
// tenant. Authentication is the first step of the handler chain inside the
// access log and the audit context, and sees every request the router passes
// on — those refused at authentication, authorization or by flow control too.
func RecordTenant(inner authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if keys := LogKeys(req.Context()); len(keys) == 2 {
			httplog.AddKeyValue(req.Context(), keys[0].(string), keys[1])
		}
		tenancy.AnnotateAudit(req.Context())
		return inner.AuthenticateRequest(req)
	})
}
