package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/httpsafe"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/notify"
)

// tracerName is the instrumentation scope of the inbox's spans (the sender's package's, as before
// the inbox had a package of its own: dashboards keep matching it).
const tracerName = "github.com/txkit/txkit/notify"

// maxDeliveryLen bounds a delivery's JSON body: the payload, the key and the receiver's name
// (each escaped at most 6 bytes a byte) and the rest of the object.
const maxDeliveryLen = notify.MaxPayloadLen + 6*(notify.MaxKeyLen+notify.MaxReceiverLen) + 4096

// ApplyFunc applies one notification's result in tx, the receiver's transaction in which the
// notification's id has just been claimed: returning nil commits both, an error rolls both back
// (the sender retries).
type ApplyFunc func(ctx context.Context, tx pgx.Tx, d notify.Delivery) error

// Inbox is the receiving side: an http.Handler that verifies deliveries and applies each
// notification once, and [Inbox.Reconcile], which asks the sender for results it never got.
//
// For each delivery it checks the signature against its secrets (two during a key rotation)
// and the timestamp against ±[WithWindow] of its clock, that the delivery names this receiver,
// then, in one transaction of its database: claims the signature as a nonce in the idempotency
// store (a request seen before — a replay — is refused with 401 and nothing applied), claims the
// notification's id (a notification applied before — the sender's retry after a lost
// acknowledgement — is acknowledged without applying it again), and calls apply. A refused
// request answers 401 with the fixed text "unauthorized" (why is logged), a body longer than a
// delivery of [MaxPayloadLen] can be 413, a malformed one 400, a failed apply 500 with a request
// id that names the logged error (the sender retries); success answers 200 with the
// acknowledgement body ("success"). No answer carries an error's text.
//
// The store's keys expire with its retention (idempotency.WithRetention; run its Run): keep it
// longer than the sender's schedule and than twice notify.DefaultWindow, how far a delivery's
// timestamp may be from this receiver's clock ([New] checks the latter: a timestamp may lie up to
// the window ahead, so a replay stays possible until receipt + 2 × window). Inbox is
// safe for concurrent use.
type Inbox struct {
	pool     *pgxpool.Pool
	store    *idempotency.Store
	receiver string
	secrets  []string
	apply    ApplyFunc
	o        options
	tracer   trace.Tracer
}

// The acknowledgement's body, and the idempotency scope of the claimed ids (nonces use it with
// ":nonce").
const (
	ackBody    = "success"
	inboxScope = "notify"
)

// Option configures an [Inbox].
type Option func(*options)

type options struct {
	window time.Duration // notify.DefaultWindow; tests set it (export_test.go)
	log    *slog.Logger
	tp     trace.TracerProvider
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = obs.Logger(l) } }

// WithTracerProvider sets the OpenTelemetry tracer provider of the inbox (default: the
// application's global provider). Each authenticated delivery is applied under a server span
// "notify receive" (attributes txkit.notification and txkit.receiver), the child of the W3C
// trace context (traceparent, tracestate) the notifier sends with every attempt — the trace of
// the request that enqueued the notification — so the apply function's ctx carries that trace. A
// delivery refused before it is authenticated gets no span.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tp = tp }
}

// New returns an Inbox for receiver (this receiver's name at the sender: deliveries naming
// another are refused) applying notifications with apply in pool's database, claiming with store
// (whose table Migrate must have created), verifying with secrets (each at least 16 bytes; the
// sender's current one and, during a key rotation, the other). Missing arguments, a short secret,
// a store whose retention is not above twice the window or unusable options return an error
// wrapping notify.ErrInvalidOption.
func New(pool *pgxpool.Pool, store *idempotency.Store, receiver string, secrets []string, apply ApplyFunc, opts ...Option) (*Inbox, error) {
	o := options{window: notify.DefaultWindow, log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	if err := pgutil.CheckText(receiver, notify.MaxReceiverLen); err != nil {
		return nil, fmt.Errorf("notify: inbox: receiver name %q: %w: %w", receiver, err, notify.ErrInvalidOption)
	}
	if err := signing.CheckSecrets(secrets); err != nil {
		return nil, fmt.Errorf("notify: inbox %s: %w: %w", receiver, err, notify.ErrInvalidOption)
	}
	switch {
	case pool == nil || store == nil || apply == nil:
		return nil, fmt.Errorf("notify: inbox: nil pool, store or apply: %w", notify.ErrInvalidOption)
	case o.window <= 0 || o.log == nil:
		return nil, fmt.Errorf("notify: inbox: window %v or logger: %w", o.window, notify.ErrInvalidOption)
	case 2*o.window >= store.Retention():
		// A timestamp may lie up to the window ahead, so a delivery stays acceptable until receipt +
		// 2 × window: its nonce must be remembered at least that long.
		return nil, fmt.Errorf("notify: inbox %s: twice the window %v must be shorter than the store's retention %v (a replay is possible until receipt + 2 × window): %w",
			receiver, o.window, store.Retention(), notify.ErrInvalidOption)
	}
	return &Inbox{pool: pool, store: store, receiver: receiver, secrets: append([]string(nil), secrets...), apply: apply, o: o,
		tracer: obs.TracerProvider(o.tp).Tracer(tracerName)}, nil
}

// ServeHTTP receives one delivery.
func (in *Inbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDeliveryLen))
	if err != nil {
		if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
			in.o.log.WarnContext(r.Context(), "notify: delivery refused: body too large", slog.String("id", r.Header.Get(notify.HeaderID)), slog.Int64("limit", tooLarge.Limit))
			http.Error(w, "delivery too large", http.StatusRequestEntityTooLarge)
			return
		}
		in.o.log.WarnContext(r.Context(), "notify: reading a delivery failed", slog.String("id", r.Header.Get(notify.HeaderID)), slog.Any("err", err))
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	if err := signing.VerifyRequest(r, body, in.secrets, time.Now(), in.o.window); err != nil {
		err = fmt.Errorf("notify: %w: %w", notify.ErrUnauthorized, err)
		in.refuse(r.Context(), w, r.Header.Get(notify.HeaderID), err)
		return
	}
	var d notify.Delivery
	if err := json.Unmarshal(body, &d); err != nil || d.ID.String() != r.Header.Get(notify.HeaderID) {
		http.Error(w, "malformed delivery", http.StatusBadRequest)
		return
	}
	if d.Receiver != in.receiver {
		in.refuse(r.Context(), w, d.ID.String(), fmt.Errorf("notify: delivery %s is for receiver %q, this is %q: %w", d.ID, d.Receiver, in.receiver, notify.ErrUnauthorized))
		return
	}
	ctx, span := in.tracer.Start(obs.Propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header)), "notify receive",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("txkit.notification", d.ID.String()),
			attribute.String("txkit.receiver", d.Receiver)))
	err = pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		fresh, err := in.store.Claim(ctx, tx, inboxScope+":nonce", r.Header.Get(notify.HeaderSignature))
		if err != nil {
			return err
		}
		if !fresh {
			return fmt.Errorf("notify: delivery %s: request seen before (replay): %w", d.ID, notify.ErrUnauthorized)
		}
		_, err = in.applyOnce(ctx, tx, d)
		return err
	})
	obs.EndSpan(span, err)
	switch {
	case errors.Is(err, notify.ErrUnauthorized):
		in.refuse(ctx, w, d.ID.String(), err)
		return
	case err != nil:
		httpsafe.Error(w, in.o.log, http.StatusInternalServerError, "apply failed", err, slog.String("id", d.ID.String()))
		return
	}
	_, _ = io.WriteString(w, ackBody)
}

// refuse logs why the delivery id is refused and answers 401 with a fixed text.
func (in *Inbox) refuse(ctx context.Context, w http.ResponseWriter, id string, err error) {
	in.o.log.WarnContext(ctx, "notify: delivery refused", slog.String("id", id), slog.Any("err", err))
	http.Error(w, "unauthorized", http.StatusUnauthorized)
}

// applyOnce claims d's id in tx and applies it, reporting whether it did; a notification applied
// before is acknowledged again without being applied.
func (in *Inbox) applyOnce(ctx context.Context, tx pgx.Tx, d notify.Delivery) (bool, error) {
	first, err := in.store.Claim(ctx, tx, inboxScope, d.ID.String())
	if err != nil || !first {
		return false, err // !first: applied before, acknowledge again
	}
	return true, in.apply(ctx, tx, d)
}

// Reconcile asks the sender, through c, for the notification of each business key and applies
// the ones found that were never applied here (a lost notification is never a lost fact). c must
// ask as this Inbox's receiver (else an error wrapping notify.ErrInvalidOption, and nothing is
// asked). Only answers signed by the sender are believed (notify.Client verifies them), and only
// one about the key asked, for this receiver, is applied: another returns an error wrapping
// notify.ErrUnauthorized.
// It returns how many it applied now; keys the sender does not know are skipped. It blocks until
// every key was asked or ctx ends; failures are joined and returned after the other keys.
func (in *Inbox) Reconcile(ctx context.Context, c notify.Client, keys ...string) (int, error) {
	if c.Receiver != in.receiver {
		return 0, fmt.Errorf("notify: reconcile: the client asks as %q, this inbox is %q: %w", c.Receiver, in.receiver, notify.ErrInvalidOption)
	}
	applied := 0
	var errs []error
	for _, k := range keys {
		res, err := c.ByKey(ctx, k)
		if errors.Is(err, notify.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if res.Key != k || res.Receiver != in.receiver {
			errs = append(errs, fmt.Errorf("notify: reconcile %s: the answer is about %s/%s, not %s/%s: %w",
				k, res.Receiver, res.Key, in.receiver, k, notify.ErrUnauthorized))
			continue
		}
		d := notify.Delivery{ID: res.ID, Receiver: res.Receiver, Key: res.Key, Payload: res.Payload, CreatedAt: res.CreatedAt}
		var fresh bool
		err = pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
			var err error
			fresh, err = in.applyOnce(ctx, tx, d)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("notify: reconcile %s: %w", k, err))
			continue
		}
		if fresh {
			applied++
			in.o.log.InfoContext(ctx, "notify: reconciled a notification never received", slog.String("id", d.ID.String()), slog.String("key", k))
		}
	}
	return applied, errors.Join(errs...)
}
