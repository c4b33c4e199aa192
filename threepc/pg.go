package threepc

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/prepared"
	"github.com/txkit/txkit/participant"
)

// database is a registered PostgreSQL participant database.
type database struct {
	db     *prepared.DB
	target core.Target
}

// RegisterDB makes the PostgreSQL database behind pool a participant called name, for
// [Global.Enlist]: its CanCommit runs in a read-only transaction of pool, its PreCommit in a
// transaction prepared with PREPARE TRANSACTION, and its DoCommit or abort is COMMIT PREPARED or
// ROLLBACK PREPARED — the database's own two-phase commit, so the server needs
// max_prepared_transactions above zero (CanCommit checks it). Branches store the name: every
// Coordinator that may recover a transaction must register the same name for the same database.
//
// Besides pool, the database gets a small pool of the coordinator's own (at most
// [WithPhaseTwoConns] connections, connecting only when used, closed by [Coordinator.Close]) for
// the recovery's phase two, which must not wait behind work holding every connection of pool.
//
// The prepared transactions are named "txkit:<schema>.<prefix>:<length of gid>:<gid>:<name>",
// which is how a [PGAgent] beside the database finds this coordinator's and leaves everyone
// else's alone: coordinators with different logs must differ in schema or table prefix.
//
// An empty name, one with a backslash or a control character or longer than 199 bytes, a nil
// pool or a name registered twice returns an error wrapping [coordinator.ErrInvalidOption];
// after [Coordinator.Close], one wrapping [ErrClosed].
func (c *Coordinator) RegisterDB(name string, pool *pgxpool.Pool) error {
	d, err := prepared.NewDB(name, pool, c.o.phaseTwoConns)
	if err != nil {
		return fmt.Errorf("threepc: register database: %w: %w", err, coordinator.ErrInvalidOption)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		d.Close()
		return fmt.Errorf("threepc: register database %q: %w", name, ErrClosed)
	}
	h, err := c.b.Parts.Register("pg:"+name, pgParticipant{c: c, d: d})
	var t core.Target
	if err == nil {
		t, err = c.b.Parts.Target(h)
	}
	if err != nil {
		d.Close()
		return fmt.Errorf("threepc: register database %q: %w", name, err)
	}
	c.dbs[name] = &database{db: d, target: t}
	return nil
}

// Close closes the pools the coordinator made for phase two (one per [Coordinator.RegisterDB]);
// the caller's pools stay open. Call it after [Coordinator.Run] has returned and every
// [Global.Commit] has. It does not block on the network; calling it again does nothing and
// returns nil.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	dbs := make([]*database, 0, len(c.dbs))
	for _, d := range c.dbs {
		dbs = append(dbs, d)
	}
	c.mu.Unlock()
	for _, d := range dbs {
		d.db.Close()
	}
	return nil
}

func (c *Coordinator) database(name string) (*database, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	d, ok := c.dbs[name]
	if !ok {
		return nil, fmt.Errorf("database %q is not registered (RegisterDB): %w", name, coordinator.ErrInvalidBranch)
	}
	return d, nil
}

// pgParticipant carries out phase three on a registered database: the branch's prepared
// transaction is found by its name.
type pgParticipant struct {
	c *Coordinator
	d *prepared.DB
}

// Do commits (OpDoCommit) or rolls back (OpAbort) the branch's prepared transaction; one that is
// not there any more is success (see prepared.Finish). The starter's runs on the connection the
// branch prepared on, everyone else's on the phase-two pool.
func (p pgParticipant) Do(ctx context.Context, req participant.Request) error {
	var verb prepared.Verb
	switch req.Op {
	case participant.OpDoCommit:
		verb = prepared.Commit
	case participant.OpAbort:
		verb = prepared.Rollback
	default:
		return fmt.Errorf("threepc: database %s: op %s: a database votes and pre-commits through its branch's own transactions: %w",
			p.d.Name, req.Op, participant.ErrBadRequest)
	}
	var db prepared.Execer = p.d.P2
	if conn := prepared.HeldConn(ctx, req.GID, req.Branch); conn != nil {
		db = conn
	}
	if err := prepared.Finish(ctx, db, verb, p.c.ns.ID(req.GID, req.Branch)); err != nil {
		return fmt.Errorf("threepc: database %s: %w", p.d.Name, err)
	}
	return nil
}
