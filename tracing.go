package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracing returns a tracer exporting to OTLP over HTTP when cfg.Tracing is
// set (an OTLP endpoint is configured), and a no-op tracer otherwise. The
// exporter reads the standard OTEL_EXPORTER_OTLP_* variables itself.
// shutdown flushes what is buffered.
func tracing(ctx context.Context, cfg Config) (trace.Tracer, func(context.Context) error, error) {
	if !cfg.Tracing {
		return noop.NewTracerProvider().Tracer("guardian"), func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(cfg.ServiceName)))
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp.Tracer("github.com/guardian-pay/guardian"), tp.Shutdown, nil
}
