// Package telemetry tells tenants apart in Milo's traces, logs and heaviest-
// tenant reports without ever making a tenant a metric label: spans and log
// lines carry the project and organization as attributes and keys, and the
// only per-project series are the bounded top-N of TopProjects.
package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-base/tracing"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Span attribute keys of a request's tenant.
const (
	// ViewAttribute is the kind of context: platform, project, organization, all-projects.
	ViewAttribute = attribute.Key("milo.view")
	// ProjectAttribute is the project a request addresses.
	ProjectAttribute = attribute.Key("milo.project")
	// OrganizationAttribute is the organization of the project, or of the organization context.
	OrganizationAttribute = attribute.Key("milo.organization")
	// UserAttribute is the authenticated user's name.
	UserAttribute = attribute.Key("user.name")
)

// OrganizationLookup returns the organization of a project from a cache, ""
// when it does not know it. It must not do I/O: it runs on every traced request.
type OrganizationLookup func(project string) string

// TenantTracing wraps tp so that every span started in a request's context
// without a local parent — the request's own span, whose parent, if any, is the
// client's — carries the request's tenant and user. Child spans (admission,
// storage) are the SDK's own and hang below it; they are not annotated again.
func TenantTracing(tp tracing.TracerProvider, orgOf OrganizationLookup) tracing.TracerProvider {
	if tp == nil {
		return nil
	}
	return &tenantTracerProvider{inner: tp, orgOf: orgOf}
}

type tenantTracerProvider struct {
	embedded.TracerProvider
	inner tracing.TracerProvider
	orgOf OrganizationLookup
}

// Shutdown flushes and stops the exporter.
func (p *tenantTracerProvider) Shutdown(ctx context.Context) error { return p.inner.Shutdown(ctx) }

func (p *tenantTracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &tenantTracer{inner: p.inner.Tracer(name, opts...), orgOf: p.orgOf}
}

type tenantTracer struct {
	embedded.Tracer
	inner trace.Tracer
	orgOf OrganizationLookup
}

func (t *tenantTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	ctx, span := t.inner.Start(ctx, name, opts...)
	// Only a sampled span pays for its attributes.
	if (!parent.IsValid() || parent.IsRemote()) && span.IsRecording() {
		span.SetAttributes(RequestAttributes(ctx, t.orgOf)...)
	}
	return ctx, span
}

// RequestAttributes are the span attributes of the tenant and user of the
// authenticated request in ctx; none outside a request.
func RequestAttributes(ctx context.Context, orgOf OrganizationLookup) []attribute.KeyValue {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil
	}
	t := tenancy.From(ctx)
	attrs := []attribute.KeyValue{ViewAttribute.String(t.Kind.View()), UserAttribute.String(u.GetName())}
	switch t.Kind {
	case tenancy.Project:
		attrs = append(attrs, ProjectAttribute.String(t.Name))
		if orgOf != nil {
			if org := orgOf(t.Name); org != "" {
				attrs = append(attrs, OrganizationAttribute.String(org))
			}
		}
	case tenancy.Organization:
		attrs = append(attrs, OrganizationAttribute.String(t.Name))
	}
	return attrs
}
