package pgutil_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// SetTCPTimeouts gives a connection TCP keepalive and a user timeout: a query sent into a
// partition fails after UserTimeout, not after TCP's ~15 minutes of retransmissions.
func TestIntegrationSetTCPTimeouts(t *testing.T) {
	cfg, err := pgx.ParseConfig(testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pgutil.SetTCPTimeouts(&cfg.Config)
	c, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(t.Context()) }()
	got := testenv.TCPSettingsOf(t, c.PgConn().Conn())
	want := testenv.TCPSettings{KeepAlive: true, KeepAliveIdle: pgutil.KeepAliveIdle, UserTimeout: pgutil.UserTimeout}
	if got != want {
		t.Fatalf("socket settings %+v, want %+v", got, want)
	}
}
