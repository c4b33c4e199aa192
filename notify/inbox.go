package notify

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

	"github.com/txkit/txkit/idempotency"
)

// ApplyFunc applies one notification's result in tx, the receiver's transaction in which the
// notification's id has just been claimed: returning nil commits both, an error rolls both back
// (the sender retries).
type ApplyFunc func(ctx context.Context, tx pgx.Tx, d Delivery) error

// Inbox is the receiving side: an http.Handler that verifies deliveries and applies each
// notification once, and [Inbox.Reconcile], which asks the sender for results it never got.
//
// For each delivery it checks the signature against its secrets (two during a key rotation)
// and the timestamp against ±[WithWindow] of its clock, then, in one transaction of its
// database: claims the signature as a nonce in the idempotency store (a request seen before — a
// replay — is refused with 401 and nothing applied), claims the notification's id (a
// notification applied before — the sender's retry after a lost acknowledgement — is
// acknowledged without applying it again), and calls apply. A refused request answers 401, a
// malformed one 400, a failed apply 500 (the sender retries); success answers 200 with the
// acknowledgement body ([WithEcho]).
//
// The store's keys expire with its retention (idempotency.WithRetention; run its Run): keep it
// longer than the sender's schedule. Inbox is safe for concurrent use.
type Inbox struct {
	pool    *pgxpool.Pool
	store   *idempotency.Store
	secrets []string
	apply   ApplyFunc
	o       inboxOptions
}

// InboxOption configures an [Inbox].
type InboxOption func(*inboxOptions)

type inboxOptions struct {
	window time.Duration
	echo   string
	scope  string
	log    *slog.Logger
	now    func() time.Time
}

// WithWindow sets how far a delivery's timestamp may be from this receiver's clock (default
// [DefaultWindow]).
func WithWindow(d time.Duration) InboxOption { return func(o *inboxOptions) { o.window = d } }

// WithEcho sets the body of the acknowledgement (default "success").
func WithEcho(body string) InboxOption { return func(o *inboxOptions) { o.echo = body } }

// WithScope sets the idempotency scope of the claimed ids (default "notify"); nonces use it with
// ":nonce".
func WithScope(s string) InboxOption { return func(o *inboxOptions) { o.scope = s } }

// WithInboxLogger sets the logger (default: discard).
func WithInboxLogger(l *slog.Logger) InboxOption { return func(o *inboxOptions) { o.log = l } }

// WithInboxClock sets the clock the timestamp window is checked against (tests).
func WithInboxClock(now func() time.Time) InboxOption { return func(o *inboxOptions) { o.now = now } }

// NewInbox returns an Inbox applying notifications with apply in pool's database, claiming with
// store (whose table Migrate must have created), verifying with secrets. Missing arguments or
// unusable options return an error wrapping [ErrInvalidOption].
func NewInbox(pool *pgxpool.Pool, store *idempotency.Store, secrets []string, apply ApplyFunc, opts ...InboxOption) (*Inbox, error) {
	o := inboxOptions{window: DefaultWindow, echo: "success", scope: "notify", log: slog.New(slog.DiscardHandler), now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case pool == nil || store == nil || apply == nil:
		return nil, fmt.Errorf("notify: inbox: nil pool, store or apply: %w", ErrInvalidOption)
	case len(secrets) == 0 || slicesContainsEmpty(secrets):
		return nil, fmt.Errorf("notify: inbox: no secret, or an empty one: %w", ErrInvalidOption)
	case o.window <= 0 || o.scope == "" || o.log == nil || o.now == nil:
		return nil, fmt.Errorf("notify: inbox: window %v, scope %q, logger or clock: %w", o.window, o.scope, ErrInvalidOption)
	}
	return &Inbox{pool: pool, store: store, secrets: append([]string(nil), secrets...), apply: apply, o: o}, nil
}

// ServeHTTP receives one delivery.
func (in *Inbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := verify(r, body, in.secrets, in.o.now(), in.o.window); err != nil {
		in.o.log.Warn("notify: delivery refused", slog.String("id", r.Header.Get(HeaderID)), slog.Any("err", err))
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var d Delivery
	if err := json.Unmarshal(body, &d); err != nil || d.ID.String() != r.Header.Get(HeaderID) {
		http.Error(w, "malformed delivery", http.StatusBadRequest)
		return
	}
	err = pgx.BeginFunc(r.Context(), in.pool, func(tx pgx.Tx) error {
		fresh, err := in.store.Claim(r.Context(), tx, in.o.scope+":nonce", r.Header.Get(HeaderSignature))
		if err != nil {
			return err
		}
		if !fresh {
			return fmt.Errorf("notify: delivery %s: request seen before (replay): %w", d.ID, ErrUnauthorized)
		}
		return in.applyOnce(r.Context(), tx, d)
	})
	switch {
	case errors.Is(err, ErrUnauthorized):
		in.o.log.Warn("notify: delivery refused", slog.String("id", d.ID.String()), slog.Any("err", err))
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	case err != nil:
		in.o.log.Error("notify: applying a delivery failed; the sender will retry", slog.String("id", d.ID.String()), slog.Any("err", err))
		http.Error(w, "apply failed", http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, in.o.echo)
}

// applyOnce claims d's id in tx and applies it; a notification applied before is acknowledged
// again without being applied.
func (in *Inbox) applyOnce(ctx context.Context, tx pgx.Tx, d Delivery) error {
	first, err := in.store.Claim(ctx, tx, in.o.scope, d.ID.String())
	if err != nil {
		return err
	}
	if !first {
		return nil // applied before: acknowledge again
	}
	return in.apply(ctx, tx, d)
}

// Reconcile asks the sender, through c, for the notification of each business key and applies
// the ones found that were never applied here (a lost notification is never a lost fact). It
// returns how many it applied now; keys the sender does not know are skipped. It blocks until
// every key was asked or ctx ends; failures are joined and returned after the other keys.
func (in *Inbox) Reconcile(ctx context.Context, c Client, keys ...string) (int, error) {
	applied := 0
	var errs []error
	for _, k := range keys {
		res, err := c.ByKey(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d := Delivery{ID: res.ID, Receiver: res.Receiver, Key: res.Key, Payload: res.Payload, CreatedAt: res.CreatedAt}
		var fresh bool
		err = pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
			first, err := in.store.Claim(ctx, tx, in.o.scope, d.ID.String())
			if err != nil || !first {
				return err
			}
			fresh = true
			return in.apply(ctx, tx, d)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("notify: reconcile %s: %w", k, err))
			continue
		}
		if fresh {
			applied++
			in.o.log.Info("notify: reconciled a notification never received", slog.String("id", d.ID.String()), slog.String("key", k))
		}
	}
	return applied, errors.Join(errs...)
}
