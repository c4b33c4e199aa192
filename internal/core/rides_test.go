package core_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// batchStacks is a pgx tracer that keeps the stack of the goroutine sending each batch.
type batchStacks struct {
	mu     sync.Mutex
	stacks []string
}

func (b *batchStacks) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (b *batchStacks) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (b *batchStacks) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	buf := make([]byte, 16<<10)
	buf = buf[:runtime.Stack(buf, false)]
	b.mu.Lock()
	b.stacks = append(b.stacks, string(buf))
	b.mu.Unlock()
	return ctx
}
func (b *batchStacks) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (b *batchStacks) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (b *batchStacks) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stacks
	b.stacks = nil
	return s
}

// A write that carries only deferred finishes (a lone transaction's record with the previous
// one's finish) is sent by its caller's goroutine, as a lone write: the batch leaves from within
// CreateIn, not from a goroutine it is handed to. Group commit on and off; both writes land.
func TestIntegrationRidersSentByCaller(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []core.LogOption
	}{{"deferred only", nil}, {"group commit", []core.LogOption{core.WithGroupCommit(2 * time.Millisecond)}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			s := testenv.PG(t)
			cfg, err := pgxpool.ParseConfig(s.URL)
			if err != nil {
				t.Fatal(err)
			}
			tr := &batchStacks{}
			cfg.ConnConfig.Tracer = tr
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			l, err := core.New(pool, append([]core.LogOption{core.WithSchema(s.Name), core.WithDeferredFinish()}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.CreateIn(ctx, "g1", core.KindTCC, core.StatusConfirming, time.Minute, nil, httpBranch("a")); err != nil {
				t.Fatal(err)
			}
			if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "g1", From: core.StatusConfirming, Done: []string{"a"}, Next: core.StatusConfirmed}); err != nil {
				t.Fatal(err)
			}
			tr.take()
			if err := l.CreateIn(ctx, "g2", core.KindTCC, core.StatusTrying, time.Minute, nil, httpBranch("a")); err != nil {
				t.Fatal(err)
			}
			stacks := tr.take()
			if len(stacks) != 1 {
				t.Fatalf("g2's record with g1's finish: %d batches, want 1", len(stacks))
			}
			if !strings.Contains(stacks[0], "core.(*Log).CreateIn") {
				t.Fatalf("the batch was sent by another goroutine than CreateIn's caller:\n%s", stacks[0])
			}
			if err := l.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if st := statusOf(t, l, "g1"); st != core.StatusConfirmed {
				t.Fatalf("g1 = %s, want confirmed", st)
			}
			if st := statusOf(t, l, "g2"); st != core.StatusTrying {
				t.Fatalf("g2 = %s, want trying", st)
			}
		})
	}
}
