package prepared

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/participant"
)

// Registry is the databases registered with one coordinator (twopc's or threepc's RegisterDB):
// each is a [DB] with its phase-two pool, and an in-process participant of the coordinator core
// named "pg:<name>" that ends the branch's prepared transaction for the op that commits it and
// for [participant.OpAbort] — on the connection the starter's branch prepared on ([HeldConn]),
// else on the phase-two pool. Registry is safe for concurrent use.
type Registry struct {
	proto     string         // "twopc", "threepc": the prefix of its errors
	ns        Namespace      // names the prepared transactions
	conns     int            // phase-two pool size
	commitOp  participant.Op // the op that commits a branch
	parts     *core.Participants
	errClosed error // the coordinator's ErrClosed
	mu        sync.RWMutex
	dbs       map[string]*Registered
	closed    bool
}

// Registered is one registered database and where the recovery finds its participant.
type Registered struct {
	*DB
	Target core.Target
}

// NewRegistry returns an empty registry for the coordinator of protocol proto (its errors start
// with it) whose prepared transactions ns names, whose databases get phase-two pools of conns
// connections, whose branches commit with commitOp, whose participants are registered in parts,
// and whose ErrClosed is errClosed.
func NewRegistry(proto string, ns Namespace, conns int, commitOp participant.Op, parts *core.Participants, errClosed error) *Registry {
	return &Registry{proto: proto, ns: ns, conns: conns, commitOp: commitOp, parts: parts, errClosed: errClosed, dbs: map[string]*Registered{}}
}

// Register adds the database behind pool as name. An invalid name, a nil pool or a name
// registered twice returns an error wrapping [core.ErrInvalidOption]; after Close, one wrapping
// the coordinator's ErrClosed.
func (r *Registry) Register(name string, pool *pgxpool.Pool) error {
	db, err := NewDB(name, pool, r.conns)
	if err != nil {
		return fmt.Errorf("%s: register database: %w: %w", r.proto, err, core.ErrInvalidOption)
	}
	d := &Registered{DB: db}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		d.Close()
		return fmt.Errorf("%s: register database %q: %w", r.proto, name, r.errClosed)
	}
	h, err := r.parts.Register("pg:"+name, phaseTwo{r: r, d: d})
	if err == nil {
		d.Target, err = r.parts.Target(h)
	}
	if err != nil {
		d.Close()
		return fmt.Errorf("%s: register database %q: %w", r.proto, name, err)
	}
	r.dbs[name] = d
	return nil
}

// Get returns the database registered as name, or an error wrapping [core.ErrInvalidBranch].
func (r *Registry) Get(name string) (*Registered, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.dbs[name]
	if !ok {
		return nil, fmt.Errorf("database %q is not registered (RegisterDB): %w", name, core.ErrInvalidBranch)
	}
	return d, nil
}

// All returns the registered databases.
func (r *Registry) All() []*Registered {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Registered, 0, len(r.dbs))
	for _, d := range r.dbs {
		out = append(out, d)
	}
	return out
}

// Close closes every registered database's phase-two pool (the callers' pools stay open) and
// refuses later registrations. It does not block on the network; calling it again does nothing.
func (r *Registry) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	for _, d := range r.All() {
		d.Close()
	}
}

// Finish runs COMMIT PREPARED or ROLLBACK PREPARED (v) of the prepared transaction id on db, one
// of d's connections or pools, its error naming the protocol and the database.
func (r *Registry) Finish(ctx context.Context, db Execer, d *Registered, v Verb, id string) error {
	if err := Finish(ctx, db, v, id); err != nil {
		return fmt.Errorf("%s: database %s: %w", r.proto, d.Name, err)
	}
	return nil
}

// phaseTwo is a registered database's participant: it ends a branch's prepared transaction,
// found by its name. One that is not there any more is success: it was committed (a commit is
// decided only after every branch prepared) or rolled back (or, for an abort, never prepared).
type phaseTwo struct {
	r *Registry
	d *Registered
}

func (p phaseTwo) Do(ctx context.Context, req participant.Request) error {
	var v Verb
	switch req.Op {
	case p.r.commitOp:
		v = Commit
	case participant.OpAbort:
		v = Rollback
	default:
		return fmt.Errorf("%s: database %s: op %s: a database takes part through its branch's own transactions: %w",
			p.r.proto, p.d.Name, req.Op, participant.ErrBadRequest)
	}
	var db Execer = p.d.P2
	if conn := HeldConn(ctx, req.GID, req.Branch); conn != nil {
		db = conn
	}
	return p.r.Finish(ctx, db, p.d, v, p.r.ns.ID(req.GID, req.Branch))
}
