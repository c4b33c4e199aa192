package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
)

// TestIntegrationHotRowSmallPool: 64 transfers at once, every one taking 1 from alice in east and
// giving it to bob in west (one hot row in each database), through pools of 8 connections per
// database. The work of the transfers waiting for alice's row lock holds every east connection,
// so a transfer that prepared must reach its COMMIT PREPARED without asking that pool for one.
// Bound: all 64 commit within 30 s (about a second here, each transfer holding the hot rows for a
// few milliseconds in turn), no prepared transaction is left and no money is lost or made.
func TestIntegrationHotRowSmallPool(t *testing.T) {
	const (
		transfers = 64
		conns     = 8
		bound     = 30 * time.Second
	)
	b := newBank(t)
	c := b.coordinatorOn(map[string]*pgxpool.Pool{"east": b.pool(b.East, conns, nil), "west": b.pool(b.West, conns, nil)},
		coretest.CallTimeout(2*time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	transfer := func() error {
		g, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		if err := b.move(ctx, g, 1); err != nil {
			_ = g.Abort(ctx)
			return err
		}
		return g.Commit(ctx)
	}
	start := time.Now()
	errs := make(chan error, transfers)
	for range transfers {
		go func() { errs <- transfer() }()
	}
	var failed []error
	for range transfers {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	took := time.Since(start)
	t.Logf("%d transfers on one hot row through pools of %d: %v, %d failed", transfers, conns, took, len(failed))
	if len(failed) > 0 {
		t.Errorf("%d of %d transfers did not commit within %v; the first: %v", len(failed), transfers, bound, failed[0])
	}
	b.NoPrepared()
	b.WantBalances(startBalance-transfers, startBalance+transfers)
}

// TestIntegrationResolveInDoubtPoolExhausted: the in-doubt resolver ends a prepared transaction
// while every connection of the registered pool is taken (as by work waiting for the row locks
// of that very prepared transaction): it does not wait for that pool.
func TestIntegrationResolveInDoubtPoolExhausted(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	east := b.pool(b.East, 2, nil)
	c := b.coordinatorOn(map[string]*pgxpool.Pool{"east": east})
	// A prepared transaction named like ours whose gid the log has never heard of.
	orphan, err := b.Log.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orphan.Exec(ctx, "prepare transaction 'txkit:"+b.Log.Name+".txkit_2pc_:6:ghost1:east'"); err != nil {
		t.Fatal(err)
	}
	_ = orphan.Rollback(ctx) // only returns the connection: the prepared transaction lives on
	for range east.Config().MaxConns {
		conn, err := east.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := c.ResolveInDoubt(rctx)
	if err != nil || res.RolledBack != 1 {
		t.Fatalf("ResolveInDoubt with the registered pool exhausted = %+v, %v; want the orphan rolled back within 10s", res, err)
	}
	b.NoPrepared()
}

// TestIntegrationBackslashGIDDoesNothing: on a pool whose connections run with
// standard_conforming_strings = off and the simple protocol, a gid made to close the prepared
// transaction's name early (a backslash escapes the quote there) and stack a statement is
// refused by Begin, and nothing of it runs: the schema has the same tables afterwards.
func TestIntegrationBackslashGIDDoesNothing(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	off := b.pool(b.East, 4, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["standard_conforming_strings"] = "off"
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	})
	conn, err := off.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scs := conn.Conn().PgConn().ParameterStatus("standard_conforming_strings")
	conn.Release()
	if scs != "off" {
		t.Fatalf("standard_conforming_strings = %q on the pool, want off", scs)
	}
	tables := func() []string {
		rows, err := b.East.Pool.Query(ctx, `select table_name::text from information_schema.tables where table_schema = $1 order by 1`, b.East.Name)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	before := tables()
	c := b.coordinatorOn(map[string]*pgxpool.Pool{"east": off}, coretest.CallTimeout(2*time.Second))
	const gid = `\'; create table pwned(); --`
	g, err := c.Begin(ctx, coordinator.WithGID(gid))
	if !errors.Is(err, coordinator.ErrInvalidOption) || !strings.Contains(fmt.Sprint(err), "backslash") {
		t.Errorf("Begin(WithGID(%q)) = %v, want an error naming the backslash, wrapping ErrInvalidOption", gid, err)
	}
	if err == nil { // go on as a caller would, to see what the gid does
		err := g.Enlist(ctx, "east", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `update accounts set balance = balance - 1 where id = 'alice'`)
			return err
		})
		if err == nil {
			err = g.Commit(ctx)
		} else {
			_ = g.Abort(ctx)
		}
		t.Logf("Enlist and Commit with the gid: %v", err)
	}
	if after := tables(); !slices.Equal(after, before) {
		t.Errorf("tables of the participant's schema: %v before, %v after the backslash gid", before, after)
	}
	b.WantBalances(startBalance, startBalance)
}
