package participant

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/httpsafe"
)

// cleanupTimeout bounds the rollback that follows a failure, which runs even when the request's
// ctx has ended.
const cleanupTimeout = 5 * time.Second

// HandlerOption configures one [Barrier.Handler].
type HandlerOption func(*handlerOptions)

type handlerOptions struct {
	ops []Op // nil: every op
}

// WithAllowedOps restricts a handler to ops: a request for another op (a confirm posted to the
// route of tries) is answered 400 without running anything. Without it a handler serves every op,
// so one route may take all the ops of a protocol and fn switch on req.Op. WithAllowedOps with no
// op allows none.
func WithAllowedOps(ops ...Op) HandlerOption {
	return func(o *handlerOptions) { o.ops = append([]Op{}, ops...) }
}

// Handler returns an http.Handler serving a participant's ops over the wire protocol: it checks a
// POST's signature ([WithSecrets]), decodes the [Request] and runs fn through [Barrier.Call] in a
// transaction on the barrier's pool, claiming the signature as a nonce in it. Serve each protocol
// on a route of its own restricted to its ops ([WithAllowedOps]), fn switching on req.Op. It answers
//
//   - 200 {"ok":true}: fn succeeded or was skipped (a duplicate, an empty rollback);
//   - 401 ([ErrUnauthorized]): a signature missing, wrong, stale or replayed, or any request to a
//     barrier without secrets not built with [WithUnsignedRequests];
//   - 400: a malformed body, an op not allowed here, an invalid gid or branch, or fn's error
//     wrapping [ErrBadRequest] (405 for a method other than POST);
//   - 409 ([StatusRefused]): fn's error wrapping [ErrRefused], or a hanging try;
//   - 500 "participant: internal error (request id ID)": any other error or a panic in fn, logged
//     with that id (key request_id); the coordinator retries.
//
// Every answer but 200 leaves nothing written and no connection checked out. A 400 or 409 carries
// the error's text: never wrap internal errors with [ErrBadRequest] or [ErrRefused]. fn runs under
// the request's ctx, with its server span. The handler is safe for concurrent use.
func (b *Barrier) Handler(fn func(ctx context.Context, tx pgx.Tx, req Request) error, opts ...HandlerOption) http.Handler {
	var ho handlerOptions
	for _, opt := range opts {
		opt(&ho)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "participant: method "+r.Method+" not allowed, use POST", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, b.o.maxBody))
		if err != nil {
			http.Error(w, fmt.Sprintf("participant: read request: %v", err), http.StatusBadRequest)
			return
		}
		nonce, err := b.authenticate(r, body)
		if err != nil {
			b.unauthorized(w, r, err)
			return
		}
		req, err := decodeRequest(bytes.NewReader(body))
		if err == nil && ho.ops != nil && !slices.Contains(ho.ops, req.Op) {
			err = fmt.Errorf("participant: op %s is not served here (this handler takes %v): %w", req.Op, ho.ops, ErrBadRequest)
		}
		ctx := r.Context() // the op's span context, once it ran
		if err == nil {
			ctx, err = b.traced(extractTrace(r), trace.SpanKindServer, req, func(ctx context.Context) error {
				return b.do(ctx, req, nonce, fn)
			})
		}
		switch code := statusOf(err); {
		case err == nil:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
		case code == http.StatusUnauthorized:
			b.unauthorized(w, r, err)
		case code == http.StatusInternalServerError:
			// httpsafe.Error's answer, logged with the span's ctx (trace_id, span_id).
			id := httpsafe.RequestID()
			b.o.log.ErrorContext(ctx, "participant: internal error",
				append([]any{slog.String("request_id", id), slog.Any("err", err)}, reqAttrs(req, err)...)...)
			http.Error(w, "participant: internal error (request id "+id+")", code)
		case code == StatusRefused:
			http.Error(w, refusal(req, err), code) // HTTP.Do adds the op, gid, branch and URL
		default:
			http.Error(w, err.Error(), code)
		}
	})
}

// unauthorized answers 401 without saying which check failed; the reason is logged.
func (b *Barrier) unauthorized(w http.ResponseWriter, r *http.Request, err error) {
	level := slog.LevelWarn
	if len(b.o.secrets) == 0 {
		level = slog.LevelError // misconfigured: no request can pass
	}
	b.o.log.Log(r.Context(), level, "participant: request refused", slog.String("remote", r.RemoteAddr),
		slog.String("path", r.URL.Path), slog.Any("err", err))
	http.Error(w, "participant: unauthorized: request signature missing, invalid, expired or replayed", http.StatusUnauthorized)
}

// Participant returns an in-process [Participant] doing what [Barrier.Handler] does, without HTTP
// (and so without signatures): Do validates req, begins a transaction on the barrier's pool, runs fn through
// [Barrier.Call] and commits. It returns nil on success (including a skipped duplicate or an
// empty rollback), an error wrapping [ErrRefused] for a business refusal or a hanging try
// ([ErrHanging]), an error wrapping [ErrBadRequest] for an invalid request, and any other error
// for the coordinator to retry — a panic in fn among them: it is recovered, the transaction
// rolled back, and the panic logged with its stack and returned as an error. Do runs under an
// internal span "participant <op>", the child of ctx's span, which fn's ctx carries (see
// [WithBarrierTracerProvider]). Do blocks until the transaction ends; ctx scopes the whole call,
// fn included. The Participant is safe for concurrent use.
func (b *Barrier) Participant(fn func(ctx context.Context, tx pgx.Tx, req Request) error) Participant {
	return ParticipantFunc(func(ctx context.Context, req Request) error {
		ctx, err := b.traced(ctx, trace.SpanKindInternal, req, func(ctx context.Context) error {
			return b.do(ctx, req, "", fn)
		})
		if err != nil && statusOf(err) == http.StatusInternalServerError {
			b.o.log.ErrorContext(ctx, "participant: request failed", append(reqAttrs(req, err), slog.Any("err", err))...)
		}
		return err
	})
}

// do runs req in a transaction of its own on b's pool. A non-empty nonce (the request's signature)
// is claimed in that transaction first: a nonce claimed before is a replay, refused with
// ErrUnauthorized. The transaction is always ended: committed on success, rolled back otherwise,
// a panic in fn included, which is recovered and returned as a *panicError.
func (b *Barrier) do(ctx context.Context, req Request, nonce string, fn func(ctx context.Context, tx pgx.Tx, req Request) error) (err error) {
	if fn == nil {
		return fmt.Errorf("participant: %s %s/%s: nil function", req.Op, req.GID, req.Branch)
	}
	// Refuse a bad request before taking a connection.
	if _, err := barrierKey(req); err != nil {
		return err
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("participant: %s %s/%s: begin: %w", req.Op, req.GID, req.Branch, err)
	}
	defer func() {
		p := recover()
		if p != nil {
			err = &panicError{op: req.Op, gid: req.GID, branch: req.Branch, value: p, stack: debug.Stack()}
		}
		// Always: after a commit it is a no-op (ErrTxClosed), otherwise it ends the transaction and
		// gives the connection back to the pool, even when ctx has ended.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rerr := tx.Rollback(cctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			b.o.log.WarnContext(ctx, "participant: rollback failed", append(reqAttrs(req, rerr), slog.Any("err", rerr))...)
		}
		if p == http.ErrAbortHandler { //nolint:errorlint // the sentinel panic value, compared as net/http does
			panic(p)
		}
	}()
	if nonce != "" {
		fresh, err := b.store.Claim(ctx, tx, nonceScope, nonce)
		if err != nil {
			return fmt.Errorf("participant: %s %s/%s: claim the request's nonce: %w", req.Op, req.GID, req.Branch, err)
		}
		if !fresh {
			return fmt.Errorf("participant: %s %s/%s: request seen before (replay): %w", req.Op, req.GID, req.Branch, ErrUnauthorized)
		}
	}
	err = b.Call(ctx, tx, req, func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, tx, req) })
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("participant: %s %s/%s: commit: %w", req.Op, req.GID, req.Branch, err)
	}
	return nil
}

// nonceScope is the idempotency scope of the signatures [Barrier.Handler] has accepted; the
// barrier's own scopes are op names.
const nonceScope = "nonce"

// panicError is a panic of a participant's function, recovered.
type panicError struct {
	op          Op
	gid, branch string
	value       any
	stack       []byte
}

func (e *panicError) Error() string {
	return fmt.Sprintf("participant: %s %s/%s: panic: %v", e.op, e.gid, e.branch, e.value)
}

// decodeRequest reads a JSON Request; every failure wraps ErrBadRequest.
func decodeRequest(body io.Reader) (Request, error) {
	var req Request
	dec := json.NewDecoder(body)
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, ErrBadRequest) {
			return req, err
		}
		return req, fmt.Errorf("participant: decode request: %w: %w", ErrBadRequest, err)
	}
	if dec.More() {
		return req, fmt.Errorf("participant: decode request: data after the JSON object: %w", ErrBadRequest)
	}
	if _, err := barrierKey(req); err != nil {
		return req, err
	}
	return req, nil
}

// statusOf maps an error of Call or fn to the HTTP status the handler answers.
func statusOf(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrRefused):
		return StatusRefused
	}
	return http.StatusInternalServerError
}

// reqAttrs are the log attributes of req, and the stack when err is a recovered panic.
func reqAttrs(req Request, err error) []any {
	attrs := []any{slog.String("gid", req.GID), slog.String("branch", req.Branch), slog.String("op", req.Op.String())}
	var pe *panicError
	if errors.As(err, &pe) {
		attrs = append(attrs, slog.String("stack", string(pe.stack)))
	}
	return attrs
}
