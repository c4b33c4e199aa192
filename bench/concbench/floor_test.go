package concbench_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
)

// The floor side (TXKIT_CONCBENCH_FLOOR=1, `make bench-floor`): the bare side plus the writes
// txkit's guarantees need, written by hand in the plainest pgx — what a careful team would write
// without txkit, on tables with nothing but a key and a status. A coordinator's record with its
// branches (one statement), its decision (TCC's commit decision, the saga's success) before the
// calls that depend on it, 2PC's vote row in each prepared transaction, the outbox's and the
// notification's row in the business transaction and the write after the send; the finish the
// coordinators defer rides with the same client's next record, as theirs does. No grouping across
// clients. txkit against the floor (txkit/floor) is what txkit costs beyond those writes; the
// floor against bare (floor-ratio) is the most the writes leave for txkit/bare.

// floorDDL is the floor's tables, in the recipe's schema.
const floorDDL = `create table fl_log (id uuid primary key, status text not null);
create table fl_item (id uuid not null, name text not null, status text not null, primary key (id, name));
create table fl_msg (id uuid primary key, key text not null, body bytea not null, status text not null)`

// floorLog writes the floor's log on a pool of its own.
type floorLog struct {
	pool   *pgxpool.Pool
	finish [maxClients]uuid.UUID // each client's deferred finish, sent with its next record
}

// floorLog returns a floorLog on s's tables (made here) when the floor side is asked for, else nil.
func (e *env) floorLog(b *testing.B, s *testenv.Schema) *floorLog {
	b.Helper()
	if !e.withFloor {
		return nil
	}
	l := &floorLog{pool: e.pool(b, s)}
	mustExec(b, l.pool, floorDDL)
	return l
}

// record inserts gid's log row (status) and its items (itemStatus) in one statement, after the
// client's deferred finish in the same implicit transaction: one round trip, one commit.
func (l *floorLog) record(ctx context.Context, cl int, gid uuid.UUID, status string, items []string, itemStatus string) error {
	const rec = `with l as (insert into fl_log values ($1, $2)) insert into fl_item select $1, n, $3 from unnest($4::text[]) n`
	prev := l.finish[cl]
	l.finish[cl] = uuid.Nil
	if prev == uuid.Nil {
		_, err := l.pool.Exec(ctx, rec, gid, status, itemStatus, items)
		return err
	}
	var bt pgx.Batch
	bt.Queue(`update fl_log set status = 'done' where id = $1`, prev)
	bt.Queue(rec, gid, status, itemStatus, items)
	return l.pool.SendBatch(ctx, &bt).Close()
}

// set writes gid's status (a decision): one statement, one commit.
func (l *floorLog) set(ctx context.Context, gid uuid.UUID, status string) error {
	_, err := l.pool.Exec(ctx, `update fl_log set status = $2 where id = $1`, gid, status)
	return err
}

// branches names client cl's n branches.
func branches(cl, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = branch(i, cl)
	}
	return names
}

// tccFloor: the record with its 3 branches, the tries, the decision, the confirms; the finish
// deferred.
func tccFloor(l *floorLog, parts []participant.Participant, payload func(i, cl int) json.RawMessage) concbench.Op {
	if l == nil {
		return nil
	}
	return func(ctx context.Context, cl int) error {
		gid := uuid.Must(uuid.NewV7())
		if err := l.record(ctx, cl, gid, "trying", branches(cl, len(parts)), "tried"); err != nil {
			return err
		}
		if err := tccPhase(ctx, parts, gid.String(), cl, participant.OpTry, payload); err != nil {
			return err
		}
		if err := l.set(ctx, gid, "confirming"); err != nil {
			return err
		}
		if err := tccPhase(ctx, parts, gid.String(), cl, participant.OpConfirm, payload); err != nil {
			return err
		}
		l.finish[cl] = gid
		return nil
	}
}

// sagaFloor: the record with its 3 steps, the actions, the success before returning.
func sagaFloor(l *floorLog, parts []participant.Participant, payload func(i, cl int) json.RawMessage) concbench.Op {
	if l == nil {
		return nil
	}
	return func(ctx context.Context, cl int) error {
		gid := uuid.Must(uuid.NewV7())
		if err := l.record(ctx, cl, gid, "running", branches(cl, len(parts)), "pending"); err != nil {
			return err
		}
		if err := sagaActions(ctx, parts, gid.String(), cl, payload); err != nil {
			return err
		}
		return l.set(ctx, gid, "succeeded")
	}
}

// inTx runs the statements of bt in one transaction on l's pool: "begin", bt, "commit" — bt's
// statements in one round trip, as the bare sides' transactions send their one statement.
func (l *floorLog) inTx(ctx context.Context, bt *pgx.Batch) error {
	return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, bt).Close() })
}

// msgRow queues the insert of message id's row (key, body, status) on bt.
func msgRow(bt *pgx.Batch, id uuid.UUID, body []byte, status string) {
	bt.Queue(`insert into fl_msg values ($1, $2, $3, $4)`, id, id.String(), body, status)
}
