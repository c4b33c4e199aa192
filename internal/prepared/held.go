package prepared

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// heldKey is the context key of the connections a starter's phase two runs on (WithHeld).
type heldKey struct{}

// held are the connections gid's database branches prepared on, by branch name.
type held struct {
	gid   string
	conns map[string]*pgxpool.Conn
}

// WithHeld returns ctx carrying conns, the connections gid's branches prepared on, by branch
// name, for the code that runs their phase two ([HeldConn]): a starter's phase two goes through
// the coordinator core's calls (the same as the leader's), which know branches only by their
// recorded target, and this is how it reaches the connection each branch kept. Phase two must not
// wait for a connection of the database's pool: under load every one of them may be held by work
// waiting for the row locks this very prepared transaction holds. Without conns it returns ctx.
// conns must not change while ctx is in use.
func WithHeld(ctx context.Context, gid string, conns map[string]*pgxpool.Conn) context.Context {
	if len(conns) == 0 {
		return ctx
	}
	return context.WithValue(ctx, heldKey{}, &held{gid: gid, conns: conns})
}

// HeldConn returns the connection gid's branch prepared on, carried by ctx ([WithHeld]), or nil
// when ctx carries none for it (then phase two runs on the database's [DB.P2]).
func HeldConn(ctx context.Context, gid, branch string) *pgxpool.Conn {
	h, ok := ctx.Value(heldKey{}).(*held)
	if !ok || h.gid != gid {
		return nil
	}
	return h.conns[branch]
}
