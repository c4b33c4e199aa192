package main

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// The command's pool dials with TCP keepalive and a user timeout: a command whose PostgreSQL
// vanishes behind a partition fails after pgutil.UserTimeout, not after TCP's ~15 minutes.
func TestIntegrationPoolTCPTimeouts(t *testing.T) {
	pool, err := newPool(t.Context(), testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var got testenv.TCPSettings
	if err := pool.AcquireFunc(t.Context(), func(c *pgxpool.Conn) error {
		got = testenv.TCPSettingsOf(t, c.Conn().PgConn().Conn())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got.UserTimeout != pgutil.UserTimeout || !got.KeepAlive || got.KeepAliveIdle != pgutil.KeepAliveIdle {
		t.Fatalf("socket settings %+v, want keepalive after %v and a user timeout of %v", got, pgutil.KeepAliveIdle, pgutil.UserTimeout)
	}
}
