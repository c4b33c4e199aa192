package participant

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
)

// tracerName is the instrumentation scope of the barrier's spans.
const tracerName = "github.com/txkit/txkit/participant"

// WithBarrierTracerProvider sets the OpenTelemetry tracer provider of the barrier (default: the
// application's global provider). [Barrier.Handler] runs each authenticated request under a
// server span "participant <op>" ("participant try", ...) with the attributes txkit.gid,
// txkit.branch and txkit.op, the child of the W3C trace context (traceparent, tracestate) that
// [HTTP.Do] sends from its ctx, so that the coordinator's trace continues in the participant;
// fn's ctx carries the span. An error is recorded on the span, which then has status Error. A
// request refused before its op is known (a bad signature or body) gets no span.
func WithBarrierTracerProvider(tp trace.TracerProvider) BarrierOption {
	return func(o *barrierOptions) { o.tp = tp }
}

// injectTrace sets h's W3C trace headers from ctx (nothing when ctx carries no span).
func injectTrace(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		obs.Propagator().Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// traced runs do under the server span of req, the child of the trace context r's headers carry.
func (b *Barrier) traced(r *http.Request, req Request, do func(ctx context.Context) error) error {
	ctx := obs.Propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := b.tracer.Start(ctx, "participant "+req.Op.String(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("txkit.gid", req.GID),
			attribute.String("txkit.branch", req.Branch),
			attribute.String("txkit.op", req.Op.String()),
		))
	defer span.End()
	err := do(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}
