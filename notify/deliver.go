package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
)

// Delivery is the JSON body of a delivery, and what a receiver's apply function is given.
type Delivery struct {
	ID        uuid.UUID       `json:"id"`
	Receiver  string          `json:"receiver"`
	Key       string          `json:"key"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
	// Nonce is new for every post, so that no two posts are the same signed request: the
	// signature covers the body and a timestamp in whole seconds, and an Inbox refuses a
	// signature it has seen as a replay. Without it, a notification posted again within the same
	// second — by a new leader after a dead one's post was applied, its answer lost — was refused
	// and counted a failed attempt. Receivers need not read it.
	Nonce string `json:"nonce,omitempty"`
}

// result is one delivery's outcome.
type result struct {
	id       uuid.UUID
	receiver string
	skipped  time.Duration // not sent (the breaker held it back): due again after this long
	ok       bool
	code     int
	latency  time.Duration
	err      string
	span     trace.SpanContext // the attempt's span: its log lines carry its ids
}

// deliver posts d to rcv, signed, under a span "notify deliver" that continues the trace of the
// enqueuing request (a child of the stored context, linked to the span ctx carries, if any), and
// returns the outcome, counted in the metrics and set on the span.
func (n *Notifier) deliver(ctx context.Context, rcv Receiver, d due) result {
	kind := trace.WithSpanKind(trace.SpanKindClient)
	var span trace.Span
	if d.trace != "" && trace.SpanContextFromContext(ctx).IsValid() {
		ctx, span = n.tracer.Start(obs.DecodeTrace(ctx, d.trace), "notify deliver", kind, trace.WithLinks(trace.LinkFromContext(ctx)))
	} else {
		ctx, span = n.tracer.Start(obs.DecodeTrace(ctx, d.trace), "notify deliver", kind)
	}
	defer span.End()
	// The attributes are built only for a span that keeps them (docs/tracing.md): an attempt
	// that is not traced builds none.
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(attribute.String("txkit.notification", d.ID.String()), attribute.String("txkit.receiver", rcv.Name),
			attribute.Int("txkit.attempt", d.attempt))
	}
	res := n.post(ctx, rcv, d.Delivery)
	res.span = span.SpanContext()
	outcome := attemptOK
	switch {
	case res.ok:
	case res.code != 0:
		outcome = attemptRefused
	default:
		outcome = attemptError
	}
	n.metrics.attempt[outcome].Inc()
	if recording {
		span.SetAttributes(attribute.String("txkit.result", outcome))
		if res.code != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", res.code))
		}
	}
	if !res.ok {
		span.RecordError(errors.New(res.err))
		span.SetStatus(codes.Error, res.err)
	}
	return res
}

// post posts d to rcv, signed, and returns the outcome; it observes the round trip's latency.
func (n *Notifier) post(ctx context.Context, rcv Receiver, d Delivery) result {
	res := result{id: d.ID, receiver: rcv.Name}
	d.Nonce = uuid.NewString()
	body, err := json.Marshal(d)
	if err != nil {
		res.err = err.Error()
		return res
	}
	cctx, cancel := context.WithTimeout(ctx, n.o.callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, rcv.URL, bytes.NewReader(body))
	if err != nil {
		res.err = err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderID, d.ID.String())
	req.Header.Set(HeaderReceiver, rcv.Name)
	obs.Propagator().Inject(ctx, propagation.HeaderCarrier(req.Header)) // the attempt's span
	signRequest(req, rcv.Secrets[0], time.Now(), body)
	start := time.Now()
	resp, err := n.o.client.Do(req)
	if err != nil {
		res.latency, res.err = time.Since(start), err.Error()
		n.metrics.latency.Observe(res.latency.Seconds())
		return res
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	res.latency, res.code = time.Since(start), resp.StatusCode
	n.metrics.latency.Observe(res.latency.Seconds())
	switch {
	case err != nil:
		res.err = "reading the answer: " + err.Error()
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		res.err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(answer)))
	case rcv.Echo != "" && strings.TrimSpace(string(answer)) != rcv.Echo:
		res.err = fmt.Sprintf("answer %q is not the acknowledgement %q", strings.TrimSpace(string(answer)), rcv.Echo)
	default:
		res.ok = true
	}
	return res
}
