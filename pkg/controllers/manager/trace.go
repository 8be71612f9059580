package manager

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/telemetry"
)

// Tenanted is a work queue key that belongs to one project or organization.
type Tenanted interface {
	// TenantKeys returns the project (or "") and the organization (or "") of
	// the key, as far as the key itself tells.
	TenantKeys() (project, organization string)
}

// instrumentation names Milo's controllers' tracer.
const instrumentation = "go.miloapis.com/milo/controllers"

// Begin starts the work of controller on key: a span of the reconcile, child
// of nothing (the global tracer provider: a no-op unless the server traces),
// and a logger carrying the controller, the key and its tenant. end records
// the outcome and ends the span.
func Begin(ctx context.Context, controller string, key any) (_ context.Context, end func(error)) {
	object := fmt.Sprint(key)
	attrs := []attribute.KeyValue{attribute.String("milo.controller", controller), attribute.String("milo.object", object)}
	logKeys := []any{"controller", controller, "key", object}
	if t, ok := key.(Tenanted); ok {
		project, org := t.TenantKeys()
		if project != "" {
			attrs = append(attrs, telemetry.ProjectAttribute.String(project))
			logKeys = append(logKeys, "project", project)
		}
		if org != "" {
			attrs = append(attrs, telemetry.OrganizationAttribute.String(org))
			logKeys = append(logKeys, "organization", org)
		}
	}
	ctx, span := otel.Tracer(instrumentation).Start(ctx, controller+" reconcile",
		trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues(logKeys...))
	return ctx, func(err error) {
		var retry RetryAfter
		var waiting Waiting
		switch {
		case errors.As(err, &retry), errors.As(err, &waiting):
			span.SetAttributes(attribute.String("milo.waiting", err.Error()))
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
