package pgutil_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// A LazyTx sends its begin with its first statement (one batch, no statement of its own) and is
// otherwise a transaction: rows read through it, rollback, savepoints, a statement without
// arguments (several in one string), a failing first statement that leaves no connection held,
// and no round trip at all when nothing is sent.
func TestIntegrationLazyTx(t *testing.T) {
	ctx := t.Context()
	s := testenv.PG(t)
	pool, rt := testenv.CountingPool(t, s)
	if _, err := pool.Exec(ctx, `create table lazy (id int primary key, v text not null)`); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `select count(*) from lazy`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	sends := rt.During
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	tx := pgutil.NewLazyTx(pool)
	if q, b := sends(func() {
		_, err := tx.Exec(ctx, `insert into lazy values ($1, 'a')`, 1)
		must(err)
	}); q != 0 || b != 1 {
		t.Fatalf("first Exec sent %d statements and %d batches; want 1 batch (begin with it)", q, b)
	}
	if q, b := sends(func() {
		_, err := tx.Exec(ctx, `insert into lazy values ($1, 'b')`, 2)
		must(err)
	}); q != 1 || b != 0 {
		t.Fatalf("second Exec sent %d statements and %d batches; want 1 statement", q, b)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows visible before the commit", n)
	}
	must(tx.Commit(ctx))
	if n := count(); n != 2 {
		t.Fatalf("%d rows after the commit; want 2", n)
	}

	// Query and QueryRow as first statements; Rollback discards; a savepoint.
	tx = pgutil.NewLazyTx(pool)
	rows, err := tx.Query(ctx, `select id from lazy where id >= $1 order by id`, 1)
	must(err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	must(err)
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
		t.Fatalf("Query read %v; want [1 2]", ids)
	}
	sp, err := tx.Begin(ctx)
	must(err)
	_, err = sp.Exec(ctx, `insert into lazy values ($1, 'c')`, 3)
	must(err)
	must(sp.Rollback(ctx))
	_, err = tx.Exec(ctx, `delete from lazy where id = $1`, 1)
	must(err)
	must(tx.Rollback(ctx))
	if n := count(); n != 2 {
		t.Fatalf("%d rows after a rollback; want 2", n)
	}
	tx = pgutil.NewLazyTx(pool)
	var v string
	must(tx.QueryRow(ctx, `select v from lazy where id = $1`, 2).Scan(&v))
	if v != "b" {
		t.Fatalf("QueryRow read %q; want b", v)
	}
	must(tx.Commit(ctx))
	tx = pgutil.NewLazyTx(pool)
	if err := tx.QueryRow(ctx, `select v from lazy where id = $1`, 9).Scan(&v); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("QueryRow of no row: %v; want pgx.ErrNoRows", err)
	}
	must(tx.Rollback(ctx))

	// Without arguments (two statements in one string) it opens the transaction first.
	tx = pgutil.NewLazyTx(pool)
	_, err = tx.Exec(ctx, `insert into lazy values (4, 'd'); insert into lazy values (5, 'e')`)
	must(err)
	must(tx.Rollback(ctx))
	if n := count(); n != 2 {
		t.Fatalf("%d rows after rolling back the two inserts; want 2", n)
	}

	// An exec-mode option cannot go in a batch: the begin goes first, on its own.
	tx = pgutil.NewLazyTx(pool)
	if q, b := sends(func() {
		_, err := tx.Exec(ctx, `insert into lazy values ($1, 'f')`, pgx.QueryExecModeSimpleProtocol, 6)
		must(err)
	}); q != 2 || b != 0 {
		t.Fatalf("Exec with an exec mode sent %d statements and %d batches; want 2 statements (begin, insert)", q, b)
	}
	must(tx.Rollback(ctx))

	// A failing first statement: the error comes back, and ending the transaction frees the
	// connection.
	tx = pgutil.NewLazyTx(pool)
	if _, err := tx.Exec(ctx, `insert into lazy values ($1, 'dup')`, 2); err == nil {
		t.Fatal("a duplicate key as first statement did not fail")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("Commit after a failed statement succeeded")
	}
	// Nothing sent: nothing to commit, no round trip.
	tx = pgutil.NewLazyTx(pool)
	if q, b := sends(func() { must(tx.Commit(ctx)) }); q != 0 || b != 0 || tx.Begun() {
		t.Fatalf("an empty transaction sent %d statements and %d batches (begun %v); want none", q, b, tx.Begun())
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return pool.Stat().AcquiredConns() == 0 },
		"a connection is still checked out")
	if n := count(); n != 2 {
		t.Fatalf("%d rows at the end; want 2", n)
	}
}

// A LazyTx on a connection sends a deferred statement with the next statement or the commit, in
// their round trip and before them: the commit carries it (also when nothing was sent before, with
// the begin), a later statement sees its row, a statement that cannot ride is preceded by a batch
// of it, a savepoint opened after it does not undo it, and its failure is the error of the call
// that sent it, the commit then committing nothing. A pool's LazyTx refuses it.
func TestIntegrationLazyTxDefer(t *testing.T) {
	ctx := t.Context()
	s := testenv.PG(t)
	pool, rt := testenv.CountingPool(t, s)
	if _, err := pool.Exec(ctx, `create table lazy (id int primary key, v text not null)`); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		t.Helper()
		var n int
		must(pool.QueryRow(ctx, `select count(*) from lazy`).Scan(&n))
		return n
	}
	conn, err := pool.Acquire(ctx)
	must(err)
	defer conn.Release()
	errDone := errors.New("done's error")
	var got []int
	insert := func(tx *pgutil.LazyTx, id int) {
		t.Helper()
		var back int
		if !tx.Defer(pgutil.Deferred{
			SQL: `insert into lazy values ($1, 'x') returning id`, Args: []any{id}, Dest: []any{&back},
			Done: func(_ context.Context, err error) error {
				if err != nil {
					return fmt.Errorf("%w: %w", errDone, err)
				}
				got = append(got, back)
				return nil
			},
		}) {
			t.Fatal("Defer on a connection's LazyTx refused")
		}
	}

	// After a first statement: the commit carries it, one batch.
	tx := pgutil.NewLazyTx(conn)
	_, err = tx.Exec(ctx, `insert into lazy values ($1, 'a')`, 1)
	must(err)
	insert(tx, 2)
	if q, b := rt.During(func() { must(tx.Commit(ctx)) }); q != 0 || b != 1 {
		t.Fatalf("Commit with a deferred insert sent %d statements and %d batches; want 1 batch", q, b)
	}
	if n := count(); n != 2 || len(got) != 1 || got[0] != 2 {
		t.Fatalf("%d rows after the commit, Done saw %v; want 2 rows and [2]", n, got)
	}
	if err := tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("Rollback after the commit: %v; want pgx.ErrTxClosed", err)
	}
	if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
		t.Fatalf("connection in transaction status %c after the commit; want I", st)
	}

	// Nothing sent before: begin, insert and commit in one batch.
	tx = pgutil.NewLazyTx(conn)
	insert(tx, 3)
	if q, b := rt.During(func() { must(tx.Commit(ctx)) }); q != 0 || b != 1 || count() != 3 {
		t.Fatalf("a lone deferred insert sent %d statements and %d batches, %d rows; want 1 batch, 3 rows", q, b, count())
	}

	// A later statement with arguments rides after it and sees its row; one without arguments
	// is preceded by a batch of it.
	tx = pgutil.NewLazyTx(conn)
	insert(tx, 4)
	var n int
	if q, b := rt.During(func() { must(tx.QueryRow(ctx, `select count(*) from lazy where id >= $1`, 4).Scan(&n)) }); q != 0 || b != 1 || n != 1 {
		t.Fatalf("a statement after a deferred insert sent %d statements and %d batches and saw %d rows; want 1 batch, 1 row", q, b, n)
	}
	insert(tx, 5)
	if q, b := rt.During(func() {
		_, err := tx.Exec(ctx, `delete from lazy where id = 4`)
		must(err)
	}); q != 1 || b != 1 {
		t.Fatalf("a statement without arguments after a deferred insert sent %d statements and %d batches; want 1 of each", q, b)
	}
	// A savepoint opened after it, rolled back, does not undo it.
	insert(tx, 6)
	sp, err := tx.Begin(ctx)
	must(err)
	must(sp.Rollback(ctx))
	must(tx.Commit(ctx))
	if n := count(); n != 5 {
		t.Fatalf("%d rows; want 5 (1, 2, 3, 5, 6)", n)
	}

	// A failing deferred insert: Commit returns Done's error and commits nothing.
	got = nil
	tx = pgutil.NewLazyTx(conn)
	_, err = tx.Exec(ctx, `insert into lazy values ($1, 'b')`, 7)
	must(err)
	insert(tx, 1) // taken
	if err := tx.Commit(ctx); !errors.Is(err, errDone) {
		t.Fatalf("Commit with a failing deferred insert: %v; want Done's error", err)
	}
	if st := conn.Conn().PgConn().TxStatus(); st != 'I' || count() != 5 {
		t.Fatalf("after a failed commit: transaction status %c, %d rows; want I and 5 (7 not committed)", st, count())
	}
	// Failing with a later statement: that statement returns it.
	tx = pgutil.NewLazyTx(conn)
	insert(tx, 1)
	if _, err := tx.Exec(ctx, `insert into lazy values ($1, 'c')`, 8); !errors.Is(err, errDone) {
		t.Fatalf("a statement after a failing deferred insert: %v; want Done's error", err)
	}
	must(tx.Rollback(ctx))
	// Rollback drops it unsent.
	tx = pgutil.NewLazyTx(conn)
	insert(tx, 9)
	if q, b := rt.During(func() { must(tx.Rollback(ctx)) }); q != 0 || b != 0 {
		t.Fatalf("Rollback of a deferred insert sent %d statements and %d batches; want none", q, b)
	}
	if n := count(); n != 5 || len(got) != 0 {
		t.Fatalf("%d rows, Done saw %v; want 5 and none", n, got)
	}
	if pgutil.NewLazyTx(pool).Defer(pgutil.Deferred{SQL: `select 1`}) {
		t.Fatal("Defer on a pool's LazyTx accepted")
	}
}
