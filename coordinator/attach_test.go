package coordinator_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

// gate is an in-process participant that counts the ops it runs and holds op held until released.
type gate struct {
	held    participant.Op
	release chan struct{}
	mu      sync.Mutex
	ran     map[participant.Op]int
}

func (g *gate) Do(ctx context.Context, req participant.Request) error {
	g.mu.Lock()
	g.ran[req.Op]++
	g.mu.Unlock()
	if req.Op != g.held {
		return nil
	}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) count(op participant.Op) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ran[op]
}

// startOrAttach is a request handler's start of the transaction of one business key: start it
// under the key, and on ErrExists (a retried request) attach to the one already recorded. exists
// is told when this caller attached. Both return the outcome, read with Attach.
func startOrAttach(ctx context.Context, c coordinator.Base, key string, start func(context.Context, string) error,
	exists func()) (coordinator.Status, error) {
	err := start(ctx, key)
	if errors.Is(err, coordinator.ErrExists) {
		exists()
	} else if err != nil {
		return 0, err
	}
	return c.Attach(ctx, key)
}

// pair builds two coordinators with newFn on pool's schema, each with p registered as "p", and
// returns the first and start made by each (given the coordinator and its handle of p).
func pair[C coordinator.Base](t *testing.T, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error), pool *pgxpool.Pool,
	schema string, p participant.Participant, start func(C, participant.Participant) func(context.Context, string) error,
) (coordinator.Base, [2]func(context.Context, string) error) {
	var starts [2]func(context.Context, string) error
	var first C
	for i := range starts {
		c := coretest.New(t, newFn, pool, schema)
		starts[i] = start(c, coretest.Register(t, c, "p", p))
		if i == 0 {
			first = c
		}
	}
	return first, starts
}

// Two concurrent starts of one business key (coordinator.WithGID), on two coordinators (two
// instances of a service), make one transaction on every protocol: the second is refused with
// ErrExists before a participant executes any of its work, and Attach gives it the first's
// outcome once that is final. A start after the first finished reads that outcome at once.
func TestIntegrationStartOrAttach(t *testing.T) {
	env := coretest.NewEnv(t, "attach")
	pool, schema := env.Schema.Pool, env.Schema.Name
	type starts = [2]func(context.Context, string) error
	type protocol struct {
		name string
		held participant.Op // the op after the claim, held while the second start comes
		want coordinator.Status
		// make returns one of the coordinators and a start on each of two whose participant is p.
		make func(p participant.Participant) (coordinator.Base, starts)
	}
	for _, pr := range []protocol{
		{"tcc", participant.OpTry, tcc.StatusConfirmed, func(p participant.Participant) (coordinator.Base, starts) {
			return pair(t, tcc.New, pool, schema, p, func(c *tcc.Coordinator, h participant.Participant) func(context.Context, string) error {
				return func(ctx context.Context, key string) error {
					g, err := c.Begin(ctx, coordinator.WithGID(key))
					if err != nil {
						return err
					}
					if err := g.Try(ctx, tcc.Branch{Name: "b", Participant: h}); err != nil {
						return errors.Join(err, g.Rollback(ctx))
					}
					return g.Commit(ctx)
				}
			})
		}},
		{"saga", participant.OpAction, saga.StatusSucceeded, func(p participant.Participant) (coordinator.Base, starts) {
			return pair(t, saga.New, pool, schema, p, func(c *saga.Coordinator, h participant.Participant) func(context.Context, string) error {
				return func(ctx context.Context, key string) error {
					s, err := c.Begin(ctx, coordinator.WithGID(key))
					if err != nil {
						return err
					}
					if err := s.Add(saga.Step{Name: "b", Participant: h}); err != nil {
						return err
					}
					return s.Submit(ctx)
				}
			})
		}},
		{"twopc", participant.OpPrepare, twopc.StatusCommitted, func(p participant.Participant) (coordinator.Base, starts) {
			return pair(t, twopc.New, pool, schema, p, func(c *twopc.Coordinator, h participant.Participant) func(context.Context, string) error {
				t.Cleanup(func() { _ = c.Close() })
				return func(ctx context.Context, key string) error {
					g, err := c.Begin(ctx, coordinator.WithGID(key))
					if err != nil {
						return err
					}
					if err := g.EnlistParticipant(twopc.Branch{Name: "b", Participant: h}); err != nil {
						return err
					}
					return g.Commit(ctx)
				}
			})
		}},
		{"threepc", participant.OpPreCommit, threepc.StatusCommitted, func(p participant.Participant) (coordinator.Base, starts) {
			return pair(t, threepc.New, pool, schema, p, func(c *threepc.Coordinator, h participant.Participant) func(context.Context, string) error {
				t.Cleanup(func() { _ = c.Close() })
				return func(ctx context.Context, key string) error {
					g, err := c.Begin(ctx, coordinator.WithGID(key))
					if err != nil {
						return err
					}
					if err := g.EnlistParticipant(threepc.Branch{Name: "b", Participant: h}); err != nil {
						return err
					}
					return g.Commit(ctx)
				}
			})
		}},
	} {
		t.Run(pr.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			p := &gate{held: pr.held, release: make(chan struct{}), ran: map[participant.Op]int{}}
			c, starts := pr.make(p)
			key := "order-" + pr.name
			type result struct {
				st  coordinator.Status
				err error
			}
			results := make(chan result, 2)
			attached := make(chan struct{}, 3)
			exists := func() { attached <- struct{}{} }
			for _, start := range starts {
				go func() {
					st, err := startOrAttach(ctx, c, key, start, exists)
					results <- result{st, err}
				}()
			}
			// One start holds its participant's op; the other is refused and attaches.
			select {
			case <-attached:
			case r := <-results:
				t.Fatalf("a start returned %v, %v before the other attached", r.st, r.err)
			case <-ctx.Done():
				t.Fatalf("no start attached: %v", ctx.Err())
			}
			close(p.release)
			for range starts {
				select {
				case r := <-results:
					if r.err != nil || r.st != pr.want {
						t.Fatalf("start or attach = %v, %v; want %v", r.st, r.err, pr.want)
					}
				case <-ctx.Done():
					t.Fatalf("waiting for the outcomes: %v", ctx.Err())
				}
			}
			if n := p.count(pr.held); n != 1 {
				t.Fatalf("%s ran %d times, want once: one transaction", pr.held, n)
			}
			// The refused start rolled nothing back: the branch (same gid, same name) is the first's.
			for _, op := range []participant.Op{participant.OpCancel, participant.OpCompensate, participant.OpAbort} {
				if n := p.count(op); n != 0 {
					t.Fatalf("%s ran %d times: the refused start rolled back the first's branch", op, n)
				}
			}
			// A retry after the outcome: refused, and reads it at once.
			st, err := startOrAttach(ctx, c, key, starts[1], exists)
			if err != nil || st != pr.want || len(attached) != 1 {
				t.Fatalf("start after the outcome = %v, %v (attached %d); want %v, attached", st, err, len(attached), pr.want)
			}
			if n := p.count(pr.held); n != 1 {
				t.Fatalf("%s ran %d times after the retry, want once", pr.held, n)
			}
			// An unknown gid.
			if _, err := c.Attach(ctx, "no-such-order"); !errors.Is(err, coordinator.ErrNotFound) {
				t.Fatalf("Attach(unknown) = %v, want ErrNotFound", err)
			}
		})
	}
}
