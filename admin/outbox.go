package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// OutboxState is the outbox's backlog.
type OutboxState struct {
	Table         string        `json:"table"`
	Pending       int64         `json:"pending"` // waiting to be published, backoffs included
	Dead          int64         `json:"dead"`    // failed every attempt; wait for an operator
	OldestPending time.Duration `json:"oldest_pending_ns"`
}

// DeadMessage is an outbox message that failed every publish it was allowed. Its body and its
// headers' values are redacted ([Secret]) but by [Admin.RevealMessage].
type DeadMessage struct {
	ID        uuid.UUID         `json:"id"`
	Topic     string            `json:"topic"`
	Key       string            `json:"key,omitempty"`
	Tags      string            `json:"tags,omitempty"`
	Headers   map[string]Secret `json:"headers,omitempty"`
	Body      Secret            `json:"body"`
	Attempts  int               `json:"attempts"`
	LastError string            `json:"last_error"`
	CreatedAt time.Time         `json:"created_at"`
}

// messageColumns are what scanMessage reads, of a row of the outbox table.
const messageColumns = `msg_id, topic, coalesce(key, ''), coalesce(tags, ''), headers, body, attempts, coalesce(last_error, ''), created_at`

// scanMessage reads messageColumns, redacted unless reveal.
func scanMessage(r pgx.Row, reveal bool) (DeadMessage, error) {
	var (
		d       DeadMessage
		headers map[string]string
		body    []byte
	)
	if err := r.Scan(&d.ID, &d.Topic, &d.Key, &d.Tags, &headers, &body, &d.Attempts, &d.LastError, &d.CreatedAt); err != nil {
		return d, err
	}
	d.Body = secret(body, reveal)
	if headers != nil {
		d.Headers = make(map[string]Secret, len(headers))
		for k, v := range headers {
			d.Headers[k] = secret([]byte(v), reveal)
		}
	}
	return d, nil
}

// message reads the outbox message id, whatever its status, unredacted.
func (a *Admin) message(ctx context.Context, id uuid.UUID) (*DeadMessage, error) {
	d, err := scanMessage(a.pool.QueryRow(ctx, `select `+messageColumns+` from `+a.obT+` where msg_id = $1`, id), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("admin: message %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("admin: message %s of %s: %w", id, a.ob.Table(), err)
	}
	return &d, nil
}

// Outbox returns the outbox's backlog: pending and dead messages and the age of the oldest pending
// one. It blocks for one query; ctx scopes the call. A missing table is an error.
func (a *Admin) Outbox(ctx context.Context) (OutboxState, error) {
	s := OutboxState{Table: a.ob.Table()}
	var oldest float64
	err := a.pool.QueryRow(ctx, `select count(*) filter (where status = 'pending'), count(*) filter (where status = 'dead'),
    coalesce(extract(epoch from now() - min(created_at) filter (where status = 'pending')), 0)::float8
from `+a.obT).Scan(&s.Pending, &s.Dead, &oldest)
	if err != nil {
		return OutboxState{}, fmt.Errorf("admin: outbox backlog of %s: %w", s.Table, err)
	}
	s.OldestPending = time.Duration(max(oldest, 0) * float64(time.Second))
	return s, nil
}

// DeadMessages returns up to limit (1..[MaxLimit]) dead messages in the order they were enqueued,
// starting after the message after (uuid.Nil: from the first). A limit out of range returns an
// error wrapping [ErrBadRequest]; an after that is not in the table, one wrapping [ErrNotFound].
// It blocks for one query.
func (a *Admin) DeadMessages(ctx context.Context, limit int, after uuid.UUID) ([]DeadMessage, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	var cursor *uuid.UUID
	if after != uuid.Nil {
		cursor = &after
	}
	rows, err := a.pool.Query(ctx, `select `+messageColumns+`
from `+a.obT+`
where status = 'dead' and ($2::uuid is null or id > (select id from `+a.obT+` where msg_id = $2))
order by id
limit $1`, limit, cursor)
	if err != nil {
		return nil, fmt.Errorf("admin: dead messages of %s: %w", a.ob.Table(), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadMessage, error) { return scanMessage(r, false) })
	if err != nil {
		return nil, fmt.Errorf("admin: dead messages of %s: %w", a.ob.Table(), err)
	}
	if len(out) == 0 && cursor != nil {
		var one int
		err := a.pool.QueryRow(ctx, `select 1 from `+a.obT+` where msg_id = $1`, after).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("admin: dead messages after %s: no such message: %w", after, ErrNotFound)
		}
	}
	if out == nil {
		out = []DeadMessage{}
	}
	return out, nil
}

// Requeue makes the dead message id pending again (outbox.Outbox.Requeue: no failed attempts, due
// at once, the relay woken) on behalf of actor, and records the call in the audit table. A message
// that is pending returns an error wrapping [ErrConflict] ("message X is pending, not dead"; a
// repeat of a requeue that was done says so too, and has no second effect); an unknown id one
// wrapping [ErrNotFound]. It blocks for a transaction and the audit insert.
func (a *Admin) Requeue(ctx context.Context, actor string, id uuid.UUID) error {
	_, err := a.mutate(ctx, call{actor: actor, action: ActionRequeue, target: id.String()}, func(ctx context.Context) error {
		return a.requeue(ctx, id)
	})
	return err
}

func (a *Admin) requeue(ctx context.Context, id uuid.UUID) error {
	return pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var status string
		err := tx.QueryRow(ctx, `select status from `+a.obT+` where msg_id = $1 for update`, id).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("admin: requeue: message %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("admin: requeue %s: %w", id, err)
		}
		if status != "dead" {
			return fmt.Errorf("admin: requeue: message %s is %s, not dead: %w", id, status, ErrConflict)
		}
		if _, err := a.ob.Requeue(ctx, tx, id); err != nil {
			return fmt.Errorf("admin: requeue %s: %w", id, err)
		}
		return nil
	})
}

// RequeueAll makes every dead message pending again on behalf of actor, records the call (target
// "*") in the audit table, and returns how many it requeued.
func (a *Admin) RequeueAll(ctx context.Context, actor string) (int64, error) {
	var n int64
	_, err := a.mutate(ctx, call{actor: actor, action: ActionRequeueAll, target: "*"}, func(ctx context.Context) error {
		var err error
		n, err = a.ob.RequeueAll(ctx, a.pool)
		if err != nil {
			return fmt.Errorf("admin: requeue all: %w", err)
		}
		return nil
	})
	return n, err
}

// OutboxTable returns the outbox table's schema-qualified name, unquoted ("txkit_outbox",
// "shop.txkit_outbox"). It does not block.
func (a *Admin) OutboxTable() string { return a.ob.Table() }
