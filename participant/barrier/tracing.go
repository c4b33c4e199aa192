package barrier

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/participant"
)

// tracerName is the instrumentation scope of the barrier's spans (the package's name before it
// left package participant: dashboards keep matching it).
const tracerName = "github.com/txkit/txkit/participant"

// traced runs do under the span "participant <op>" of req, of the given kind, the child of ctx's
// span context, records do's error on it, and returns that error with the span's ctx, for the
// log lines written about the op after the span ended. It is the one tracing path of
// [Barrier.Handler] (a server span continuing the request's W3C headers) and
// [Barrier.Participant] (an internal span under the caller's).
func (b *Barrier) traced(ctx context.Context, kind trace.SpanKind, req participant.Request, do func(ctx context.Context) error) (context.Context, error) {
	ctx, span := b.tracer.Start(ctx, "participant "+req.Op.String(), trace.WithSpanKind(kind),
		trace.WithAttributes(
			attribute.String("txkit.gid", req.GID),
			attribute.String("txkit.branch", req.Branch),
			attribute.String("txkit.op", req.Op.String()),
		))
	var err error
	defer func() { // also when do re-panics (http.ErrAbortHandler)
		spanErr := err
		if callerGone(ctx, err) { // not the op's error: its caller left (see callerGone)
			span.AddEvent("caller gone", trace.WithAttributes(attribute.String("txkit.reason", err.Error())))
			spanErr = nil
		}
		obs.EndSpan(span, spanErr)
	}()
	err = do(ctx)
	return ctx, err
}

// extractTrace returns r's ctx with the W3C trace context r's headers carry (as a remote parent).
func extractTrace(r *http.Request) context.Context {
	return obs.Propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
}
