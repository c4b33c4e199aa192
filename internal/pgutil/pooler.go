package pgutil

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Pooled reports whether a connection that was given process id startPID at start-up (its
// BackendKeyData) is answered by backend backendPID (pg_backend_pid()) — another: it reaches
// PostgreSQL through a connection pooler such as PgBouncer, which gives its clients keys of its
// own. With transaction pooling, session state (a session advisory lock, LISTEN, SET) then stays
// with a server connection the pooler hands to other clients.
func Pooled(startPID, backendPID uint32) bool { return startPID != backendPID }

// BehindPooler asks conn's backend for its process id and reports [Pooled]: one round trip.
func BehindPooler(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid uint32
	if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		return false, err
	}
	return Pooled(conn.PgConn().PID(), pid), nil
}
