package threepc

import (
	"github.com/jackc/pgx/v5/pgxpool"
)

// RegisterDB makes the PostgreSQL database behind pool a participant called name, for
// [Global.Enlist]: its CanCommit runs in a read-only transaction of pool, its PreCommit in a
// transaction prepared with PREPARE TRANSACTION, and its DoCommit or abort is COMMIT PREPARED or
// ROLLBACK PREPARED — the database's own two-phase commit, so the server needs
// max_prepared_transactions above zero (CanCommit checks it). Branches store the name: every
// Coordinator that may recover a transaction must register the same name for the same database.
//
// Besides pool, the database gets a small pool of the coordinator's own (at most
// 2 connections, connecting only when used, closed by [Coordinator.Close]) for
// the recovery's phase two, which must not wait behind work holding every connection of pool.
//
// The prepared transactions are named "txkit:<schema>.<prefix>:<length of gid>:<gid>:<name>",
// which is how a agent.PG beside the database finds this coordinator's and leaves everyone
// else's alone: coordinators with different logs must differ in schema or table prefix.
//
// An empty name, one with a backslash or a control character or longer than 199 bytes, a nil
// pool or a name registered twice returns an error wrapping [coordinator.ErrInvalidOption];
// after [Coordinator.Close], one wrapping [ErrClosed].
func (c *Coordinator) RegisterDB(name string, pool *pgxpool.Pool) error {
	return c.dbs.Register(name, pool)
}

// Close closes the pools the coordinator made for phase two (one per [Coordinator.RegisterDB]);
// the caller's pools stay open. Call it after [Coordinator.Run] has returned and every
// [Global.Commit] has. It does not block on the network; calling it again does nothing and
// returns nil.
func (c *Coordinator) Close() error {
	c.dbs.Close()
	return nil
}
