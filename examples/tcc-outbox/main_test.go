package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock/pglock"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/tcc"
)

// envStarter makes the test binary a starter process (see starter): "<shape>|<PostgreSQL URL>|
// <schema>|<stock URL>|<secret>", shape "recipe" or "naive".
const envStarter = "TXKIT_TCC_OUTBOX_STARTER"

func TestMain(m *testing.M) {
	if arg := os.Getenv(envStarter); arg != "" {
		os.Exit(starter(arg))
	}
	testenv.VerifyNoLeaks(m)
}

// TestIntegrationTCCOutbox runs the example as go run does: one order placed, one refused.
func TestIntegrationTCCOutbox(t *testing.T) {
	pg := testenv.PG(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := run(ctx, pg.URL, pg.Name, testenv.Logger(t)); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// TestIntegrationTCCOutboxStarterKilled SIGKILLs the process that placed an order between the
// recorded commit decision and the write of the order row and its outbox message, then lets the
// leader (this process) recover. With the recipe (the order branch's confirm writes both) the
// leader confirms the order branch here and the row and the message exist once; with the naive
// shape (both written after Commit returns) the stock is sold and the order is lost for good.
//
// The kill lands between the decision and the write without a hook in the example: this test
// holds a SHARE lock on the orders table, so the starter's insert waits on it (seen in
// pg_stat_activity) until the starter is killed; its transaction never commits, and the test
// checks that nothing is written before the leader runs.
func TestIntegrationTCCOutboxStarterKilled(t *testing.T) {
	for _, shape := range []string{"recipe", "naive"} {
		t.Run(shape, func(t *testing.T) {
			pg := testenv.PG(t)
			ctx := t.Context()
			secret, err := newSecret()
			if err != nil {
				t.Fatal(err)
			}
			signing, err := participant.NewSigningClient(secret, nil)
			if err != nil {
				t.Fatal(err)
			}
			stockBar, err := barrier.New(pg.Pool, barrier.WithTable(pg.Name, ""), barrier.WithSecrets(secret))
			if err != nil {
				t.Fatal(err)
			}
			if err := stockBar.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			stockSrv := httptest.NewServer(stockHandler(stockBar, pg.Name))
			t.Cleanup(stockSrv.Close)
			locks, err := pglock.New(pg.Pool, pglock.WithSchema(pg.Name), pglock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = locks.Close() })
			if err := locks.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			el, err := locks.NewElector("tcc-outbox/recovery", "leader")
			if err != nil {
				t.Fatal(err)
			}
			// The leader: an instance of the order service like the starter, in this process.
			leader, err := newShop(ctx, pg.Pool, pg.Name, el, signing, stockSrv.URL+"/stock/tcc", testenv.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := migrateApp(ctx, pg.Pool, pg.Name, 10); err != nil {
				t.Fatal(err)
			}

			// Hold inserts into orders back until the starter is dead.
			lockTx, err := pg.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lockTx.Rollback(context.WithoutCancel(ctx)) }()
			if _, err := lockTx.Exec(ctx, `lock table `+table(pg.Name, "orders")+` in share mode`); err != nil {
				t.Fatal(err)
			}

			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envStarter+"="+strings.Join([]string{shape, pg.URL, pg.Name, stockSrv.URL + "/stock/tcc", secret}, "|"))
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var backend int // the starter's PostgreSQL backend, waiting to insert the order
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
				select {
				case err := <-exited:
					t.Fatalf("the starter exited before it was killed: %v\n%s", err, out.String())
				default:
				}
				err := pg.Pool.QueryRow(ctx, `select pid from pg_stat_activity
					where wait_event_type = 'Lock' and query like '%insert into ' || $1 || '%'`, table(pg.Name, "orders")).Scan(&backend)
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					t.Fatal(err)
				}
				return err == nil
			}, "the starter's insert into orders to wait on the lock")
			var gid, decided string
			if err := pg.Pool.QueryRow(ctx, `select gid, status from txkit_global`).Scan(&gid, &decided); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			<-exited
			t.Logf("starter SIGKILLed while writing the order row of %s (transaction %s)", gid, decided)
			if err := lockTx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			// The starter's backend goes on to its insert, then finds its client gone and rolls
			// back: once it has ended, the starter has written nothing, and whatever is written
			// next is the leader's.
			testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
				var n int
				if err := pg.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity where pid = $1`, backend).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n == 0
			}, "the killed starter's backend %d to end", backend)
			var before int
			if err := pg.Pool.QueryRow(ctx, `select (select count(*) from orders) + (select count(*) from txkit_outbox)`).Scan(&before); err != nil {
				t.Fatal(err)
			}
			if before != 0 {
				t.Fatalf("%d order rows and messages before the leader ran, want 0", before)
			}

			testenv.Run(t, leader.tccs.Run)
			testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
				// The recoverer has started (it stores its partitions first; a Run cancelled
				// before that returns the cancellation as an error).
				var started bool
				if err := pg.Pool.QueryRow(ctx, `select to_regclass('txkit_partitions') is not null`).Scan(&started); err != nil {
					t.Fatal(err)
				}
				if !started {
					return false
				}
				var st string
				if err := pg.Pool.QueryRow(ctx, `select status from txkit_global where gid = $1`, gid).Scan(&st); err != nil {
					t.Fatal(err)
				}
				return st == tcc.StatusConfirmed.String()
			}, "the leader to confirm %s", gid)

			var orders, messages, available, reserved, sold int
			if err := pg.Pool.QueryRow(ctx, `select (select count(*) from orders where gid = $1),
				(select count(*) from txkit_outbox where key = $1 and topic = 'order-paid'),
				available, reserved, sold from stock where sku = 'sku-1'`, gid).
				Scan(&orders, &messages, &available, &reserved, &sold); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: decision %s at the kill; after recovery: %d order rows, %d outbox messages; stock available %d reserved %d sold %d",
				shape, decided, orders, messages, available, reserved, sold)
			if available != 7 || reserved != 0 || sold != 3 {
				t.Errorf("stock available %d reserved %d sold %d, want 7 0 3 (confirmed)", available, reserved, sold)
			}
			switch shape {
			case "recipe":
				if decided != tcc.StatusConfirming.String() {
					t.Errorf("the starter was killed with the transaction %s, want confirming (decided, not finished)", decided)
				}
				if orders != 1 || messages != 1 {
					t.Errorf("recipe: %d order rows and %d outbox messages, want exactly 1 of each", orders, messages)
				}
			case "naive":
				// Commit returned: the confirms are done, and the finish written or (deferred
				// finish) about to be — a leader that finds it unwritten confirms again, which the
				// barrier makes a no-op. Nothing writes the row or its message: they are lost for
				// good.
				if decided != tcc.StatusConfirmed.String() && decided != tcc.StatusConfirming.String() || orders != 0 || messages != 0 {
					t.Errorf("naive: transaction %s, %d order rows, %d messages; want confirmed (or confirming, its finish deferred), 0, 0 (the loss the recipe prevents)",
						decided, orders, messages)
				}
			}
		})
	}
}

// starter is the process TestIntegrationTCCOutboxStarterKilled kills: it places one order of 3
// with the recipe (shop.place) or the naive shape (placeNaive). Either blocks on the test's lock
// on the orders table until it is killed; it returns an exit code only when it failed first.
func starter(arg string) int {
	f := strings.Split(arg, "|")
	if len(f) != 5 {
		fmt.Fprintf(os.Stderr, "bad %s %q\n", envStarter, arg)
		return 2
	}
	shape, url, schema, stockURL, secret := f[0], f[1], f[2], f[3], f[4]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := func() error {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return err
		}
		defer pool.Close()
		signing, err := participant.NewSigningClient(secret, nil)
		if err != nil {
			return err
		}
		s, err := newShop(ctx, pool, schema, nil, signing, stockURL, slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		o := order{SKU: "sku-1", Qty: 3}
		if shape == "naive" {
			return placeNaive(ctx, s, pool, o)
		}
		_, err = s.place(ctx, o)
		return err
	}()
	fmt.Fprintln(os.Stderr, "the starter was not killed:", err)
	return 2
}

// placeNaive is the shape docs/coordinators.md warns against: the TCC transaction covers only the
// stock, and the order row and its message are written after Commit returns.
func placeNaive(ctx context.Context, s *shop, pool *pgxpool.Pool, o order) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	g, err := s.tccs.Begin(ctx)
	if err != nil {
		return err
	}
	if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: s.stock, Payload: body}); err != nil {
		return errors.Join(err, g.Rollback(ctx))
	}
	if err := g.Commit(ctx); err != nil && !errors.Is(err, coordinator.ErrIncomplete) {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { // a crash before this commits loses the order
		if _, err := tx.Exec(ctx, `insert into `+table(s.schema, "orders")+` (gid, sku, qty) values ($1, $2, $3)`,
			g.GID(), o.SKU, o.Qty); err != nil {
			return err
		}
		_, err := s.ob.Enqueue(ctx, tx, outbox.Message{Topic: "order-paid", Key: g.GID(), Body: body})
		return err
	})
}
