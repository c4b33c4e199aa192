package participant

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
)

// tracerName is the instrumentation scope of the barrier's spans.
const tracerName = "github.com/txkit/txkit/participant"

// WithBarrierTracerProvider sets the OpenTelemetry tracer provider of the barrier (default: the
// application's global provider). Each op the barrier runs for a caller gets a span "participant
// <op>" ("participant try", ...) with the attributes txkit.gid, txkit.branch and txkit.op, and the
// op's function gets the span in its ctx; an error is recorded on the span, which then has
// status Error:
//
//   - [Barrier.Handler] starts a server span, the child of the W3C trace context (traceparent,
//     tracestate) that [HTTP.Do] sends from its ctx, so that the coordinator's trace continues in
//     the participant. A request refused before its op is known (a bad signature or body) gets no
//     span.
//   - [Barrier.Participant] starts an internal span, the child of the span in Do's ctx (the
//     coordinator's client span of the branch call).
//
// Log lines written about an op (a failure, a failed rollback) are written with the span's ctx,
// so a handler that reads it (trace_id, span_id) can tie them to the trace.
func WithBarrierTracerProvider(tp trace.TracerProvider) BarrierOption {
	return func(o *barrierOptions) { o.tp = tp }
}

// injectTrace sets h's W3C trace headers from ctx (nothing when ctx carries no span).
func injectTrace(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		obs.Propagator().Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// traced runs do under the span "participant <op>" of req, of the given kind, the child of ctx's
// span context, records do's error on it, and returns that error with the span's ctx, for the
// log lines written about the op after the span ended. It is the one tracing path of
// [Barrier.Handler] (a server span continuing the request's W3C headers) and
// [Barrier.Participant] (an internal span under the caller's).
func (b *Barrier) traced(ctx context.Context, kind trace.SpanKind, req Request, do func(ctx context.Context) error) (context.Context, error) {
	ctx, span := b.tracer.Start(ctx, "participant "+req.Op.String(), trace.WithSpanKind(kind),
		trace.WithAttributes(
			attribute.String("txkit.gid", req.GID),
			attribute.String("txkit.branch", req.Branch),
			attribute.String("txkit.op", req.Op.String()),
		))
	var err error
	defer func() { obs.EndSpan(span, err) }() // also when do re-panics (http.ErrAbortHandler)
	err = do(ctx)
	return ctx, err
}

// extractTrace returns r's ctx with the W3C trace context r's headers carry (as a remote parent).
func extractTrace(r *http.Request) context.Context {
	return obs.Propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
}
