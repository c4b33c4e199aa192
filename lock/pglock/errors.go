package pglock

import "errors"

// ErrPooled: an [AdvisoryMutex] was asked for a lock through a connection pooler (PgBouncer):
// the pool's connections are not served by one PostgreSQL session each, so a session lock taken
// on one would be held by whichever client the pooler serves next. Nothing is taken. A [Mutex]
// (lease rows) works through a pooler; an AdvisoryMutex needs a direct connection.
var ErrPooled = errors.New("pglock: session advisory locks need a direct connection, not a pooler (PgBouncer)")
