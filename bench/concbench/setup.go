package concbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// Waiters lets a client wait until an asynchronous path (a consumer, a receiver) has seen the
// message or notification it sent. Safe for concurrent use; the zero value is not: use NewWaiters.
type Waiters struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// NewWaiters returns an empty Waiters.
func NewWaiters() *Waiters { return &Waiters{m: map[string]chan struct{}{}} }

// Expect registers id; Wait(id) returns once Done(id) is called, even if Done came first after
// Expect.
func (w *Waiters) Expect(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.m[id]; !ok {
		w.m[id] = make(chan struct{})
	}
}

// Done marks id as seen; an id not expected (a warm-up, a redelivery) is ignored.
func (w *Waiters) Done(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.m[id]; ok {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

// Wait blocks until Done(id) for an expected id, ctx ends, or timeout passes (an error naming id).
func (w *Waiters) Wait(ctx context.Context, id string, timeout time.Duration) error {
	w.mu.Lock()
	ch, ok := w.m[id]
	w.mu.Unlock()
	if !ok {
		return fmt.Errorf("concbench: %s was not expected", id)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	defer func() {
		w.mu.Lock()
		delete(w.m, id)
		w.mu.Unlock()
	}()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return fmt.Errorf("concbench: %s not seen within %v", id, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Prepared is one database's part of a hand-written two-phase commit: SQL run with Args in a
// transaction on a connection of Pool.
type Prepared struct {
	Pool *pgxpool.Pool
	SQL  string
	Args []any
}

// HandPrepared is the two-phase commit one writes by hand with pgx, without a coordinator or a
// log (twopc's bare baseline): each part's statement in a transaction of its own, PREPARE
// TRANSACTION '<id>:<i>' on all of them at once, then COMMIT PREPARED on all at once. It blocks
// until the last commit; on an error, transactions already prepared are left for the caller to
// find in pg_prepared_xacts. ctx scopes every statement.
func HandPrepared(ctx context.Context, id string, parts ...Prepared) error {
	txs := make([]pgx.Tx, len(parts))
	conns := make([]*pgxpool.Conn, len(parts))
	for i, p := range parts {
		conn, err := p.Pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("concbench: %w", err)
		}
		defer conn.Release()
		conns[i] = conn
		if txs[i], err = conn.Begin(ctx); err != nil {
			return fmt.Errorf("concbench: %w", err)
		}
		if _, err := txs[i].Exec(ctx, p.SQL, p.Args...); err != nil {
			return fmt.Errorf("concbench: %w", err)
		}
	}
	var g errgroup.Group
	for i, tx := range txs {
		g.Go(func() error { _, err := tx.Exec(ctx, fmt.Sprintf("prepare transaction '%s:%d'", id, i)); return err })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("concbench: prepare: %w", err)
	}
	// On the connections already held: taking others from the pools while holding these deadlocks
	// once every connection of a pool is held by a transfer waiting for one.
	for i, conn := range conns {
		g.Go(func() error { _, err := conn.Exec(ctx, fmt.Sprintf("commit prepared '%s:%d'", id, i)); return err })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("concbench: commit prepared: %w", err)
	}
	return nil
}
