package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"go.miloapis.com/milo/pkg/tenancy"
)

func TestRequestSpansCarryTheirTenantAndChildrenDoNot(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := TenantTracing(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), func(p string) string {
		return map[string]string{"p1": "acme"}[p]
	})
	tracer := tp.Tracer("test")

	ctx := request.WithUser(tenancy.WithTenant(context.Background(), tenancy.ProjectTenant("p1")), &user.DefaultInfo{Name: "alice"})
	ctx, root := tracer.Start(ctx, "request")
	_, child := tracer.Start(ctx, "storage")
	child.End()
	root.End()
	// A client's span context (a traceparent) is a remote parent: the
	// request's span is still the request's.
	remote := trace.ContextWithRemoteSpanContext(request.WithUser(tenancy.WithTenant(context.Background(), tenancy.OrganizationTenant("acme")), &user.DefaultInfo{Name: "bob"}),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true, TraceFlags: trace.FlagsSampled}))
	_, org := tracer.Start(remote, "org request")
	org.End()
	_, background := tracer.Start(context.Background(), "not a request")
	background.End()

	attrs := map[string]map[attribute.Key]string{}
	for _, s := range rec.Ended() {
		m := map[attribute.Key]string{}
		for _, a := range s.Attributes() {
			m[a.Key] = a.Value.AsString()
		}
		attrs[s.Name()] = m
	}
	want := map[string]map[attribute.Key]string{
		"request":       {ViewAttribute: "project", ProjectAttribute: "p1", OrganizationAttribute: "acme", UserAttribute: "alice"},
		"storage":       {},
		"org request":   {ViewAttribute: "organization", OrganizationAttribute: "acme", UserAttribute: "bob"},
		"not a request": {},
	}
	for name, w := range want {
		got := attrs[name]
		if len(got) != len(w) {
			t.Errorf("%s: attributes %v, want %v", name, got, w)
			continue
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("%s: %s=%q, want %q", name, k, got[k], v)
			}
		}
	}
	if rec.Ended()[0].Parent().SpanID() != rec.Ended()[1].SpanContext().SpanID() {
		t.Errorf("the storage span is not the request span's child")
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
