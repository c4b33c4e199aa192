package tcpproxy_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/tcpproxy"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestNewRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target string
		opts   []tcpproxy.Option
	}{
		{"empty target", "", nil},
		{"target without a port", "127.0.0.1", nil},
		{"zero dial timeout", "127.0.0.1:5432", []tcpproxy.Option{tcpproxy.WithDialTimeout(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tcpproxy.New(tc.target, tc.opts...)
			if !errors.Is(err, tcpproxy.ErrInvalidOption) {
				if p != nil {
					_ = p.Close()
				}
				t.Fatalf("New(%q) = %v; want ErrInvalidOption", tc.target, err)
			}
		})
	}
}

// proxied starts a proxy to the test server's PostgreSQL and returns it with a connection
// config whose connections go through it (1 s connect timeout).
func proxied(t *testing.T) (*tcpproxy.Proxy, *pgx.ConnConfig, string) {
	t.Helper()
	url := testenv.PGURL(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tcpproxy.New(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	host, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	cfg.Host, cfg.Port, cfg.ConnectTimeout = host, uint16(n), time.Second
	cfg.Fallbacks = nil
	return p, cfg, url
}

func connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	return pgx.ConnectConfig(ctx, cfg.Copy())
}

func one(ctx context.Context, c *pgx.Conn) error {
	var n int
	return c.QueryRow(ctx, "select 1").Scan(&n)
}

// TestIntegrationForwardsCutsAndRefuses: a PostgreSQL connection through the proxy works; Cut
// breaks it and the next one works; Down breaks it and refuses new ones until Up.
func TestIntegrationForwardsCutsAndRefuses(t *testing.T) {
	p, cfg, _ := proxied(t)
	ctx := t.Context()
	c, err := connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := one(ctx, c); err != nil {
		t.Fatalf("query through the proxy: %v", err)
	}
	p.Cut()
	if err := one(ctx, c); err == nil {
		t.Fatal("query on a cut connection succeeded")
	}
	c, err = connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect after Cut: %v", err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	if err := one(ctx, c); err != nil {
		t.Fatalf("query after Cut: %v", err)
	}
	p.Down()
	if err := one(ctx, c); err == nil {
		t.Fatal("query with the proxy down succeeded")
	}
	if c2, err := connect(ctx, cfg); err == nil {
		_ = c2.Close(ctx)
		t.Fatal("connected with the proxy down")
	}
	p.Up()
	c3, err := connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect after Up: %v", err)
	}
	defer func() { _ = c3.Close(context.Background()) }()
	if err := one(ctx, c3); err != nil {
		t.Fatalf("query after Up: %v", err)
	}
}

// TestIntegrationPartitionAndHeal: during a partition an open connection stays open but nothing
// comes back (a query runs into its own timeout, not a closed connection), and new connections
// are refused; Heal closes the partitioned connection and lets new ones through.
func TestIntegrationPartitionAndHeal(t *testing.T) {
	p, cfg, _ := proxied(t)
	ctx := t.Context()
	c, err := connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	p.Partition()
	if !p.Partitioned() {
		t.Fatal("Partitioned() = false after Partition")
	}
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	err = one(qctx, c)
	cancel()
	if err == nil {
		t.Fatal("query during the partition succeeded")
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("query failed after %v (%v); want it to wait for its timeout, the connection silent", waited, err)
	}
	if c2, err := connect(ctx, cfg); err == nil {
		_ = c2.Close(ctx)
		t.Fatal("connected during the partition")
	}
	p.Heal()
	if p.Partitioned() {
		t.Fatal("Partitioned() = true after Heal")
	}
	c3, err := connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect after Heal: %v", err)
	}
	defer func() { _ = c3.Close(context.Background()) }()
	if err := one(ctx, c3); err != nil {
		t.Fatalf("query after Heal: %v", err)
	}
}

// TestIntegrationPartitionAfterPrepare: armed with "PREPARE TRANSACTION", the proxy lets the
// statement reach the server and partitions at once: PostgreSQL prepares the transaction (it is in
// pg_prepared_xacts), the client never hears so and times out. The test rolls it back.
func TestIntegrationPartitionAfterPrepare(t *testing.T) {
	p, cfg, url := proxied(t)
	ctx := t.Context()
	direct, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = direct.Close(context.Background()) }()
	id := "txkit-tcpproxy-test:" + uuid.NewString()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "rollback prepared '"+id+"'"); err != nil && !strings.Contains(err.Error(), "42704") {
			t.Errorf("cleanup: rollback prepared: %v", err)
		}
	})
	c, err := connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "select txid_current()"); err != nil {
		t.Fatal(err)
	}
	p.PartitionAfter([]byte("PREPARE TRANSACTION"))
	if p.Partitioned() {
		t.Fatal("partitioned before the pattern went by")
	}
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = tx.Exec(qctx, "PREPARE TRANSACTION '"+id+"'")
	cancel()
	if err == nil {
		t.Fatal("PREPARE TRANSACTION answered through the partition")
	}
	if !p.Partitioned() {
		t.Fatalf("not partitioned after PREPARE TRANSACTION went by (%v)", err)
	}
	var n int
	if err := direct.QueryRow(ctx, `select count(*) from pg_prepared_xacts where gid = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d prepared transactions named %s; want 1: the server executed the PREPARE whose answer was lost", n, id)
	}
	t.Logf("PREPARE TRANSACTION executed by the server, the client got: %v", err)
	p.Heal()
	if _, err := direct.Exec(ctx, "rollback prepared '"+id+"'"); err != nil {
		t.Fatalf("rollback prepared: %v", err)
	}
}
