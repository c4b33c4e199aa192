package barrier

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
	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/participant"
)

// cleanupTimeout bounds the rollback that follows a failure, which runs even when the request's
// ctx has ended.
const cleanupTimeout = 5 * time.Second

// HandlerOption configures one [Barrier.Handler].
type HandlerOption func(*handlerOptions)

type handlerOptions struct {
	ops []participant.Op // nil: every op
}

// WithAllowedOps restricts a handler to ops: a request for another op (a confirm posted to the
// route of tries) is answered 400 without running anything. Without it a handler serves every op,
// so one route may take all the ops of a protocol and fn switch on req.Op. WithAllowedOps with no
// op allows none.
func WithAllowedOps(ops ...participant.Op) HandlerOption {
	return func(o *handlerOptions) { o.ops = append([]participant.Op{}, ops...) }
}

// Handler returns an http.Handler that serves the operations of a participant over the wire
// protocol: it checks the POST's signature ([WithSecrets]), decodes the [participant.Request],
// and runs fn through [Barrier.Call] in a transaction of its own on the barrier's pool, in which
// it also claims the signature as a nonce. A coordinator posts every op of a branch to the
// branch's one URL, so serve each protocol on a route of its own restricted to its ops
// ([WithAllowedOps]), with fn switching on req.Op (see the package example).
//
// It answers 200 {"ok":true} when fn succeeded or was skipped (a duplicate, an empty rollback);
// 401 ([ErrUnauthorized]) for a signature missing, wrong, stale or replayed, and for every
// request of a barrier without secrets unless built with [WithUnsignedRequests]; 400 for a
// malformed body or one larger than 1 MiB, an op not served here, an invalid gid or branch, or an error of fn wrapping
// [participant.ErrBadRequest] (405 for a method other than POST); 409 for an error of fn wrapping
// [participant.ErrRefused] or a hanging try; 500 for any other error or a panic in fn (the
// coordinator retries). A 400 or 409 carries the error's text, so do not wrap internal errors
// with those sentinels; a 500 carries only a request id, which the logged error names (at Error;
// at Info, and not an error on the span, when fn failed because the coordinator went away). Every
// answer but 200 leaves nothing written and no connection checked out. fn runs under the
// request's ctx, which carries the server span "participant <op>" ([WithTelemetry]). The
// handler is safe for concurrent use.
func (b *Barrier) Handler(fn func(ctx context.Context, tx pgx.Tx, req participant.Request) error, opts ...HandlerOption) http.Handler {
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
			err = fmt.Errorf("participant: op %s is not served here (this handler takes %v): %w", req.Op, ho.ops, participant.ErrBadRequest)
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
			id := b.internal(ctx, req, err)
			http.Error(w, "participant: internal error (request id "+id+")", code)
		case code == participant.StatusRefused:
			http.Error(w, refusalAnswer(req, err), code) // HTTP.Do adds the op, gid, branch and URL
		default:
			http.Error(w, err.Error(), code)
		}
	})
}

// internal logs err, an internal failure of req, under a new request id, with the span's ctx
// (trace_id, span_id), and returns the id: the answer says nothing else.
func (b *Barrier) internal(ctx context.Context, req participant.Request, err error) string {
	id := httpsafe.RequestID()
	level, msg := slog.LevelError, "participant: internal error"
	if callerGone(ctx, err) {
		level, msg = slog.LevelInfo, msgCallerGone
	}
	b.o.log.Log(ctx, level, msg, append([]any{slog.String("request_id", id), slog.Any("err", err)}, reqAttrs(req, err)...)...)
	return id
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

// Participant returns an in-process [participant.Participant] doing what [Barrier.Handler] does, without HTTP
// (and so without signatures): Do validates req, begins a transaction on the barrier's pool, runs fn through
// [Barrier.Call] and commits. It returns nil on success (including a skipped duplicate or an
// empty rollback), an error wrapping [participant.ErrRefused] for a business refusal or a hanging try
// ([ErrHanging]), an error wrapping [participant.ErrBadRequest] for an invalid request, and any other error
// for the coordinator to retry — a panic in fn among them: it is recovered, the transaction
// rolled back, and the panic logged with its stack and returned as an error. Do runs under an
// internal span "participant <op>", the child of ctx's span, which fn's ctx carries (see
// [WithTelemetry]). Do blocks until the transaction ends; ctx scopes the whole call,
// fn included. The Participant is safe for concurrent use.
func (b *Barrier) Participant(fn func(ctx context.Context, tx pgx.Tx, req participant.Request) error) participant.Participant {
	return participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		ctx, err := b.traced(ctx, trace.SpanKindInternal, req, func(ctx context.Context) error {
			return b.do(ctx, req, "", fn)
		})
		if err != nil && statusOf(err) == http.StatusInternalServerError {
			level, msg := slog.LevelError, "participant: request failed"
			if callerGone(ctx, err) {
				level, msg = slog.LevelInfo, msgCallerGone
			}
			b.o.log.Log(ctx, level, msg, append(reqAttrs(req, err), slog.Any("err", err))...)
		}
		return err
	})
}

// do runs req in a transaction of its own on b's pool. A non-empty nonce (the request's signature)
// is claimed in that transaction first: a nonce claimed before is a replay, refused with
// ErrUnauthorized. The transaction is always ended: committed on success, rolled back otherwise,
// a panic in fn included, which is recovered and returned as a *panicError.
func (b *Barrier) do(ctx context.Context, req participant.Request, nonce string, fn func(ctx context.Context, tx pgx.Tx, req participant.Request) error) (err error) {
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
	op          participant.Op
	gid, branch string
	value       any
	stack       []byte
}

func (e *panicError) Error() string {
	return fmt.Sprintf("participant: %s %s/%s: panic: %v", e.op, e.gid, e.branch, e.value)
}

// decodeRequest reads a JSON Request; every failure wraps ErrBadRequest.
func decodeRequest(body io.Reader) (participant.Request, error) {
	var req participant.Request
	dec := json.NewDecoder(body)
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, participant.ErrBadRequest) {
			return req, err
		}
		return req, fmt.Errorf("participant: decode request: %w: %w", participant.ErrBadRequest, err)
	}
	if dec.More() {
		return req, fmt.Errorf("participant: decode request: data after the JSON object: %w", participant.ErrBadRequest)
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
	case errors.Is(err, participant.ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, participant.ErrRefused):
		return participant.StatusRefused
	}
	return http.StatusInternalServerError
}

// msgCallerGone is the log message of an op cut short because its caller went away.
const msgCallerGone = "participant: call abandoned by the coordinator"

// callerGone reports whether err is the end of ctx, the caller's: the coordinator cancelled the
// call, timed it out or went away mid-call (its connection closed). That is an expected event
// (a coordinator stopping, a leader losing its lead), so it is logged at Info and not marked as an
// error on the op's span: the coordinator calls again and the barrier makes the retry safe.
func callerGone(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// reqAttrs are the log attributes of req, and the stack when err is a recovered panic.
func reqAttrs(req participant.Request, err error) []any {
	attrs := []any{slog.String("gid", req.GID), slog.String("branch", req.Branch), slog.String("op", req.Op.String())}
	var pe *panicError
	if errors.As(err, &pe) {
		attrs = append(attrs, slog.String("stack", string(pe.stack)))
	}
	return attrs
}

// authenticate checks r's signature over body; it returns the signature, to be claimed as a
// nonce, or an error wrapping [ErrUnauthorized]. A barrier built with [WithUnsignedRequests]
// accepts every request (and returns no nonce); one given no secret refuses every request.
func (b *Barrier) authenticate(r *http.Request, body []byte) (string, error) {
	switch {
	case b.o.unsigned:
		return "", nil
	case len(b.o.secrets) == 0:
		return "", fmt.Errorf("participant: this handler has no secret to verify requests with (WithSecrets): %w", ErrUnauthorized)
	}
	if err := signing.VerifyRequest(r, body, b.o.secrets, time.Now(), b.o.window); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return r.Header.Get(participant.HeaderSignature), nil
}
