package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// The actions the audit table records.
const (
	ActionRequeue    = "outbox.requeue"
	ActionRequeueAll = "outbox.requeue_all"
	ActionRedeliver  = "notify.redeliver"
	ActionResume     = "workflow.resume"
)

// The results the audit table records.
const (
	ResultOK           = "ok"
	ResultNotFound     = "not_found"
	ResultConflict     = "conflict"
	ResultBadRequest   = "bad_request"
	ResultUnauthorized = "unauthorized"
	ResultError        = "error"
	ResultStarted      = "started" // an Idempotency-Key's first request is still running (or died)
)

// AuditEntry is one mutating call as the audit table records it: who, when, what, and the result.
type AuditEntry struct {
	ID             int64     `json:"id"`
	At             time.Time `json:"at"`
	Actor          string    `json:"actor"`  // the token's or signer's actor; "" when refused unauthenticated
	Action         string    `json:"action"` // ActionRequeue, ActionRedeliver, ...
	Target         string    `json:"target"` // the message or notification id
	Result         string    `json:"result"` // ResultOK, ResultConflict, ...
	Status         int       `json:"status"` // the HTTP status of the answer
	Message        string    `json:"message,omitempty"`
	Remote         string    `json:"remote,omitempty"` // the client's address (API calls)
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
}

// Audit returns the last limit (1..[MaxLimit]) audit entries, newest first. One query.
func (a *Admin) Audit(ctx context.Context, limit int) ([]AuditEntry, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	rows, err := a.pool.Query(ctx, `select id, at, actor, action, target, result, status, message, remote, coalesce(idem_key, '')
from `+a.audit+` order by id desc limit $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("admin: audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &e.Result, &e.Status, &e.Message, &e.Remote, &e.IdempotencyKey)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("admin: audit: %w", err)
	}
	return out, nil
}

// call is one mutating call: who asks what, from where, with which Idempotency-Key, and, for a
// signed request, the nonce it claims (the hex SHA-256 of its signature).
type call struct {
	actor, action, target string
	remote, key, nonce    string
}

// answer is what a mutating call answered: stored with its audit row, replayed for a repeat of its
// Idempotency-Key.
type answer struct {
	status int
	body   []byte
	replay bool
}

// outcome classifies err for the audit row and the HTTP answer.
func outcome(err error) (result string, status int) {
	switch {
	case err == nil:
		return ResultOK, http.StatusOK
	case errors.Is(err, ErrNotFound):
		return ResultNotFound, http.StatusNotFound
	case errors.Is(err, ErrConflict):
		return ResultConflict, http.StatusConflict
	case errors.Is(err, ErrBadRequest):
		return ResultBadRequest, http.StatusBadRequest
	case errors.Is(err, ErrUnauthorized):
		return ResultUnauthorized, http.StatusUnauthorized
	}
	return ResultError, http.StatusInternalServerError
}

// mutate runs do for c and records it in the audit table. With an Idempotency-Key (c.key) or a
// nonce (c.nonce), a first call claims them with a "started" row before do runs; a repeat finds
// that row and answers what the first call answered (or, while the first still runs, a
// conflict), without running do again.
func (a *Admin) mutate(ctx context.Context, c call, do func(context.Context) error) (answer, error) {
	if c.actor == "" {
		return answer{}, fmt.Errorf("admin: %s %s: empty actor: %w", c.action, c.target, ErrUnauthorized)
	}
	var rowID int64
	if c.key != "" || c.nonce != "" {
		ans, id, err := a.claimKey(ctx, c)
		if ans.replay {
			return ans, err
		}
		if err != nil {
			// A key used for another request, or still running: refused, and recorded as such
			// (with the nonce, so that a replay of this signed request is answered from this row).
			return a.refuse(ctx, c.withoutKey(), err), err
		}
		rowID = id
	}
	err := do(ctx)
	result, status := outcome(err)
	body := a.answerBody(c, err)
	msg := ""
	if err != nil {
		msg = message(err)
	}
	// The record outlives a cancelled ctx: the effect may have happened.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	var rerr error
	if rowID != 0 {
		_, rerr = a.pool.Exec(rctx, `update `+a.audit+` set result = $2, status = $3, message = $4, response = $5, at = now()
where id = $1`, rowID, result, status, msg, body)
	} else {
		rerr = a.record(rctx, c, result, status, msg, nil)
	}
	if rerr != nil {
		a.o.log.Error("admin: audit record failed", "action", c.action, "target", c.target, "actor", c.actor, "err", rerr)
		if err == nil {
			err = fmt.Errorf("admin: %s %s done, but not recorded: %w", c.action, c.target, rerr)
		}
	}
	return answer{status: status, body: body}, err
}

// refuse records c refused with err (not run), and returns the answer to give.
func (a *Admin) refuse(ctx context.Context, c call, err error) answer {
	result, status := outcome(err)
	body := a.answerBody(c, err)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if rerr := a.record(rctx, c, result, status, message(err), body); rerr != nil {
		a.o.log.Error("admin: audit record failed", "action", c.action, "target", c.target, "actor", c.actor, "err", rerr)
	}
	return answer{status: status, body: body}
}

// claimKey inserts c's "started" row, claiming c's key and nonce, or finds the row of an earlier
// call with c's nonce (the same signed request again) or c's key.
func (a *Admin) claimKey(ctx context.Context, c call) (answer, int64, error) {
	var id int64
	err := a.pool.QueryRow(ctx, `insert into `+a.audit+` (actor, action, target, result, status, remote, idem_key, nonce)
values ($1, $2, $3, $4, 0, $5, nullif($6, ''), nullif($7, ''))
on conflict do nothing
returning id`, c.actor, c.action, c.target, ResultStarted, c.remote, c.key, c.nonce).Scan(&id)
	if err == nil {
		return answer{}, id, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return answer{}, 0, fmt.Errorf("admin: %s %s: claim idempotency key: %w", c.action, c.target, err)
	}
	var (
		action, target, result string
		status                 int
		body                   []byte
		byNonce                bool
	)
	err = a.pool.QueryRow(ctx, `select action, target, result, status, coalesce(response, ''), nonce is not distinct from $3
from `+a.audit+` where nonce = $3 or (actor = $1 and idem_key = $2)
order by nonce is not distinct from $3 desc limit 1`, c.actor, c.key, c.nonce).Scan(&action, &target, &result, &status, &body, &byNonce)
	if err != nil {
		return answer{}, 0, fmt.Errorf("admin: %s %s: read idempotency key: %w", c.action, c.target, err)
	}
	what := fmt.Sprintf("Idempotency-Key %q", c.key)
	if byNonce {
		what = "this signed request"
	}
	switch {
	case action != c.action || target != c.target:
		return answer{}, 0, fmt.Errorf("admin: %s was used for %s %s, not %s %s: %w",
			what, action, target, c.action, c.target, ErrConflict)
	case result == ResultStarted:
		return answer{}, 0, fmt.Errorf("admin: %s: its first request has not finished: %w", what, ErrConflict)
	}
	var err2 error
	if status != http.StatusOK {
		err2 = replayedError{status: status, body: body}
	}
	return answer{status: status, body: body, replay: true}, 0, err2
}

// replayedError is the refusal an earlier request with the same Idempotency-Key got.
type replayedError struct {
	status int
	body   []byte
}

func (e replayedError) Error() string { return "admin: replayed answer " + http.StatusText(e.status) }

// record inserts an audit row. A row whose nonce is taken is not inserted: it is a replay of a
// signed request whose first row is there.
func (a *Admin) record(ctx context.Context, c call, result string, status int, msg string, body []byte) error {
	_, err := a.pool.Exec(ctx, `insert into `+a.audit+` (actor, action, target, result, status, message, remote, idem_key, response, nonce)
values ($1, $2, $3, $4, $5, $6, $7, nullif($8, ''), $9, nullif($10, ''))
on conflict do nothing`, c.actor, c.action, c.target, result, status, msg, c.remote, c.key, body, c.nonce)
	if err != nil {
		return fmt.Errorf("admin: audit %s %s: %w", c.action, c.target, err)
	}
	return nil
}

const recordTimeout = 5 * time.Second
