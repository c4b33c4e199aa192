// Package barrierseam gives package threepc/agent what its Agent needs of a
// participant/barrier.Barrier beyond the barrier's public API — the pool, schema, registerer and
// retention the agent's table shares with the barrier, and the barrier's own transaction for an
// op — without widening that API.
//
// A Barrier embeds a [Sealed] under an unexported name; [Of] reaches it through the unexported
// method the embedding promotes, which only this package can name, so no other package can call it.
package barrierseam

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/participant"
)

// Func is a participant's business code, as a barrier runs it.
type Func = func(ctx context.Context, tx pgx.Tx, req participant.Request) error

// Barrier is what an agent uses of a barrier.
type Barrier struct {
	Pool       *pgxpool.Pool
	Schema     string                // "" for the connection's search_path
	Registerer prometheus.Registerer // nil: none
	Retention  time.Duration
	// Do runs fn for req through the barrier in a transaction of its own on Pool, as the
	// barrier's in-process participant does but without its span: committed when fn succeeds or
	// is skipped, rolled back otherwise (a panic in fn is recovered and returned).
	Do func(ctx context.Context, req participant.Request, fn Func) error
}

// Sealed holds a barrier's [Barrier].
type Sealed struct{ b *Barrier }

// Seal returns the Sealed a barrier embeds.
func Seal(b *Barrier) Sealed { return Sealed{b: b} }

func (s Sealed) barrier() *Barrier { return s.b }

// Of returns the [Barrier] that v (a *barrier.Barrier) embeds, or nil.
func Of(v any) *Barrier {
	if s, ok := v.(interface{ barrier() *Barrier }); ok {
		return s.barrier()
	}
	return nil
}
