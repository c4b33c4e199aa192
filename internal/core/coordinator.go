package core

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// Config is what every coordinator built on the core (tcc, saga, twopc) is configured with. Each
// coordinator package keeps its own exported options, which set these fields.
type Config struct {
	Schema, Prefix         string        // where the log's tables live (WithSchema, WithTablePrefix)
	Lease                  time.Duration // a starter's ownership of a transaction it drives
	BackoffMin, BackoffMax time.Duration // retry delays, computed by PostgreSQL
	Elector                *lock.Elector // the election Run recovers under
	Logger                 *slog.Logger
	Concurrency            int           // branch ops of one transaction called at once
	CallTimeout            time.Duration // each participant call
	Timeout                time.Duration // default global timeout
	Client                 *http.Client  // HTTP participants called by the recovery
	Schedule               string        // recovery tick (cron spec)
	Batch, RecoverConc     int           // recovery claim size and drives at once
	Retention              time.Duration // how long finished transactions are kept
	RetentionSpec          string        // cron spec of the retention job
}

// DefaultConfig returns the defaults shared by the coordinators; prefix names their tables.
func DefaultConfig(prefix string) Config {
	return Config{
		Prefix: prefix, Lease: 30 * time.Second, BackoffMin: time.Second, BackoffMax: 5 * time.Minute,
		Logger: slog.New(slog.DiscardHandler), Concurrency: 8, CallTimeout: 10 * time.Second, Timeout: time.Minute,
		Schedule: "@every 1s", Batch: 100, RecoverConc: 16, Retention: 7 * 24 * time.Hour, RetentionSpec: "@every 1m",
	}
}

// Validate returns an error wrapping [ErrInvalidOption] naming the first unusable field.
func (c Config) Validate() error {
	switch {
	case c.Logger == nil:
		return fmt.Errorf("nil logger: %w", ErrInvalidOption)
	case c.Concurrency <= 0:
		return fmt.Errorf("concurrency %d: %w", c.Concurrency, ErrInvalidOption)
	case c.CallTimeout <= 0:
		return fmt.Errorf("call timeout %v: %w", c.CallTimeout, ErrInvalidOption)
	case c.Timeout <= 0:
		return fmt.Errorf("default timeout %v: %w", c.Timeout, ErrInvalidOption)
	}
	return nil
}

// Base is the part every coordinator shares: its log, its participant registry, its
// configuration, the guard against two Runs, and the calls of branch ops. A coordinator embeds
// it and wraps its methods with its own errors and docs.
//
// Base is safe for concurrent use by multiple goroutines.
type Base struct {
	Log     *Log
	Parts   *Participants
	Cfg     Config
	running atomic.Bool
}

// NewBase validates cfg and returns a Base whose log lives in pool. It does not touch the
// database. Errors wrap [ErrInvalidOption].
func NewBase(pool *pgxpool.Pool, cfg Config) (*Base, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := []Option{WithTablePrefix(cfg.Prefix), WithLease(cfg.Lease), WithBackoff(cfg.BackoffMin, cfg.BackoffMax)}
	if cfg.Schema != "" {
		opts = append(opts, WithSchema(cfg.Schema))
	}
	l, err := New(pool, opts...)
	if err != nil {
		return nil, err
	}
	return &Base{Log: l, Parts: NewParticipants(cfg.Client), Cfg: cfg}, nil
}

// Status returns gid's status, or an error wrapping [ErrNotFound].
func (b *Base) Status(ctx context.Context, gid string) (Status, error) {
	t, err := b.Log.Get(ctx, gid)
	if err != nil {
		return 0, err
	}
	return t.Status, nil
}

// Run runs a [Recoverer] of kind's transactions with driver d under the configured elector until
// ctx ends; opts add to the recoverer's options (a leader job). It returns an error wrapping [ErrInvalidOption] without an elector and [ErrRunning]
// when another Run of b is running.
func (b *Base) Run(ctx context.Context, kind Kind, d Driver, opts ...RecoverOption) error {
	if b.Cfg.Elector == nil {
		return fmt.Errorf("no elector (WithElector): %w", ErrInvalidOption)
	}
	if !b.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer b.running.Store(false)
	ropts := append([]RecoverOption{WithSchedule(b.Cfg.Schedule), WithBatchSize(b.Cfg.Batch),
		WithConcurrency(b.Cfg.RecoverConc), WithRetention(b.Cfg.Retention, b.Cfg.RetentionSpec),
		WithLogger(b.Cfg.Logger)}, opts...)
	r, err := NewRecoverer(b.Log, b.Cfg.Elector, map[Kind]Driver{kind: d}, ropts...)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// Call calls p with the call timeout. A panic in p.Do is recovered: it is logged with its stack
// and returned as a *[PanicError], so the caller records it on the branch and retries with
// backoff like any failure, instead of the process (every leader in turn) crashing.
func (b *Base) Call(ctx context.Context, p participant.Participant, req participant.Request) (err error) {
	cctx, cancel := context.WithTimeout(ctx, b.Cfg.CallTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			err = recovered(b.Cfg.Logger, "core: participant panicked", v, slog.String("gid", req.GID),
				slog.String("branch", req.Branch), slog.String("op", req.Op.String()))
		}
	}()
	return p.Do(cctx, req)
}

// recovered logs a recovered panic's value v with the stack of the goroutine that panicked (call
// it from the deferred function) and returns it as a *PanicError.
func recovered(log *slog.Logger, msg string, v any, attrs ...any) error {
	log.Error(msg, append(attrs, slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))...)
	return &PanicError{Value: v}
}

// CallTarget calls the participant a branch recorded.
func (b *Base) CallTarget(ctx context.Context, t Target, req participant.Request) error {
	p, err := b.Parts.Resolve(t)
	if err != nil {
		return err
	}
	return b.Call(ctx, p, req)
}

// CleanupTimeout bounds the writes made after the caller's ctx ended (recording what happened).
const CleanupTimeout = 5 * time.Second

// PhaseTwo calls op on every branch of gid not yet done in the driving status st (at most
// Cfg.Concurrency at once), records the outcome with [Log.Record] (fenced with tok when it is a
// leader's) and returns the failures. onFail, when not nil, is told of each failure before it is
// recorded and may replace the error stored. A failed recording is returned as the error.
func (b *Base) PhaseTwo(ctx context.Context, tok lock.Token, gid string, st Status, op participant.Op,
	branches []Branch, onFail func(branch string, err error) error) ([]BranchFailure, error) {
	doneStatus, _ := st.BranchDone()
	next, _ := st.Outcome()
	var (
		mu     sync.Mutex
		done   []string
		failed []BranchFailure
	)
	var eg errgroup.Group
	eg.SetLimit(b.Cfg.Concurrency)
	for _, br := range branches {
		if br.Status == doneStatus {
			done = append(done, br.Name)
			continue
		}
		eg.Go(func() error {
			err := b.CallTarget(ctx, br.Target, participant.Request{GID: gid, Branch: br.Name, Op: op, Payload: br.Payload})
			if err != nil && onFail != nil {
				err = onFail(br.Name, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				done = append(done, br.Name)
			} else {
				failed = append(failed, BranchFailure{Branch: br.Name, Err: err})
			}
			return nil
		})
	}
	_ = eg.Wait()
	p := Progress{GID: gid, From: st, Done: done, Failed: failed}
	if len(failed) == 0 {
		p.Next = next
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	if err := b.Log.Record(rctx, tok, p); err != nil {
		return failed, err
	}
	return failed, nil
}
