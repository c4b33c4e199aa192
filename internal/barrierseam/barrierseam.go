// Package barrierseam gives package threepc/agent what its Agent needs of a
// participant/barrier.Barrier, and package participant/grpcbarrier what its interceptor needs,
// beyond the barrier's public API — the pool, schema, registerer and
// retention the agent's table shares with the barrier, and the barrier's own transaction for an
// op — without widening that API.
//
// A Barrier embeds a [Sealed] under an unexported name; [Of] reaches it through the unexported
// method the embedding promotes, which only this package can name, so no other package can call it.
package barrierseam

import (
	"context"
	"log/slog"
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

	// What package participant/grpcbarrier serves calls with, as the barrier's HTTP handler
	// serves requests. Secrets, Unsigned and Window are the barrier's signature settings
	// (barrier.WithSecrets, WithUnsignedRequests, DefaultSignatureWindow); Log its logger.
	Secrets  []string
	Unsigned bool
	Window   time.Duration
	Log      *slog.Logger
	// Serve runs fn for req under the server span "participant <op>", a child of ctx's span
	// context, in a transaction of its own in which nonce (unless empty) is claimed first: a
	// nonce claimed before is a replay, refused with an error wrapping barrier.ErrUnauthorized.
	// It returns the span's ctx, for the log lines about the op, and the outcome.
	Serve func(ctx context.Context, req participant.Request, nonce string, fn Func) (context.Context, error)
	// Internal logs err, an internal failure of req (a panic with its stack), under a new
	// request id, and returns the id, the only thing the answer may say.
	Internal func(ctx context.Context, req participant.Request, err error) string
	// Refusal is the text answered for the refusal err of req: the reason the business code
	// gave, without the gid, branch and op the caller sent.
	Refusal func(req participant.Request, err error) string
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
