package participant

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
)

// cleanupTimeout bounds the rollback that follows a failure, which runs even when the request's
// ctx has ended.
const cleanupTimeout = 5 * time.Second

// Handler returns an http.Handler that serves one operation of a participant over the wire
// protocol: it decodes the JSON [Request] from a POST, begins a transaction on pool, runs fn
// through [Barrier.Call] (so at most once, with empty rollbacks and hanging tries handled), and
// commits. A participant is a few lines:
//
//	mux.Handle("POST /stock/try", bar.Handler(pool, reserve))
//	mux.Handle("POST /stock/confirm", bar.Handler(pool, commitReservation))
//	mux.Handle("POST /stock/cancel", bar.Handler(pool, release))
//
// It answers:
//
//   - 200 with {"ok":true} when fn succeeded or was skipped (a duplicate, an empty rollback);
//   - 400 for a malformed body, an unknown op, an invalid gid or branch, a method other than POST
//     (405), or an error from fn wrapping [ErrBadRequest];
//   - 409 ([StatusRefused]) when fn returns an error wrapping [ErrRefused] (a business refusal: the
//     coordinator rolls back) or for a hanging try ([ErrHanging]);
//   - 500 for any other error (the coordinator retries).
//
// Every answer but 200 rolls the transaction back; error answers carry the error's text. The op
// comes from the body, so one handler may serve all three operations and fn switch on req.Op. fn
// runs under the request's ctx. The handler is safe for concurrent use.
func (b *Barrier) Handler(pool *pgxpool.Pool, fn func(ctx context.Context, tx pgx.Tx, req Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "participant: method "+r.Method+" not allowed, use POST", http.StatusMethodNotAllowed)
			return
		}
		req, err := decodeRequest(http.MaxBytesReader(w, r.Body, b.o.maxBody))
		if err == nil {
			err = b.do(r.Context(), pool, req, fn)
		}
		if err != nil {
			code := statusOf(err)
			if code == http.StatusInternalServerError {
				b.o.log.Error("participant: request failed", logAttrs(req, err)...)
			}
			http.Error(w, err.Error(), code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
	})
}

// Participant returns an in-process [Participant] doing what [Barrier.Handler] does, without HTTP:
// Do validates req, begins a transaction on pool, runs fn through [Barrier.Call] and commits. It
// returns nil on success (including a skipped duplicate or an empty rollback), an error wrapping
// [ErrRefused] for a business refusal or a hanging try ([ErrHanging]), an error wrapping
// [ErrBadRequest] for an invalid request, and any other error for the coordinator to retry. Do
// blocks until the transaction ends; ctx scopes the whole call, fn included. The Participant is
// safe for concurrent use.
func (b *Barrier) Participant(pool *pgxpool.Pool, fn func(ctx context.Context, tx pgx.Tx, req Request) error) Participant {
	return ParticipantFunc(func(ctx context.Context, req Request) error {
		err := b.do(ctx, pool, req, fn)
		if err != nil && statusOf(err) == http.StatusInternalServerError {
			b.o.log.Error("participant: request failed", logAttrs(req, err)...)
		}
		return err
	})
}

// do runs req in a transaction of its own on pool.
func (b *Barrier) do(ctx context.Context, pool *pgxpool.Pool, req Request, fn func(ctx context.Context, tx pgx.Tx, req Request) error) (err error) {
	if pool == nil {
		return fmt.Errorf("participant: %s %s/%s: nil pool", req.Op, req.GID, req.Branch)
	}
	if fn == nil {
		return fmt.Errorf("participant: %s %s/%s: nil function", req.Op, req.GID, req.Branch)
	}
	// Refuse a bad request before taking a connection.
	if _, err := barrierKey(req); err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("participant: %s %s/%s: begin: %w", req.Op, req.GID, req.Branch, err)
	}
	defer func() {
		if err == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rerr := tx.Rollback(cctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			b.o.log.Warn("participant: rollback failed", logAttrs(req, rerr)...)
		}
	}()
	err = b.Call(ctx, tx, req, func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, tx, req) })
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("participant: %s %s/%s: commit: %w", req.Op, req.GID, req.Branch, err)
	}
	return nil
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
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrRefused):
		return StatusRefused
	}
	return http.StatusInternalServerError
}

func logAttrs(req Request, err error) []any {
	return []any{slog.String("gid", req.GID), slog.String("branch", req.Branch), slog.String("op", req.Op.String()), slog.Any("err", err)}
}
