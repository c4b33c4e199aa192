package participant_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
)

// exampleDB connects to the PostgreSQL of `make up` (TXKIT_PG_URL) and returns a pool whose
// search_path is a schema of the example's own, and a function that drops that schema. Examples
// cannot skip, so a missing server is a panic that says how to start one.
func exampleDB(ctx context.Context) (*pgxpool.Pool, func()) {
	url := os.Getenv(testenv.EnvPG)
	if url == "" {
		panic(testenv.EnvPG + " is not set: start the servers with `make up` and run the examples with `make test` " +
			"(or set -a; eval \"$(deploy/local/env)\"; set +a)")
	}
	schema := "example_" + strings.ToLower(rand.Text()[:12])
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		panic(fmt.Sprintf("PostgreSQL at %s=%s does not answer (is `make up` running?): %v", testenv.EnvPG, url, err))
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "create schema "+schema); err != nil {
		panic(err)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	pool, err := pgxpool.New(ctx, url+sep+"search_path="+schema)
	if err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			panic(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "drop schema "+schema+" cascade"); err != nil {
			panic(err)
		}
	}
}

// A stock service is a TCC participant over HTTP: try reserves, confirm takes the reservation,
// cancel releases it. The barrier makes retries harmless, answers a cancel that overtook its try
// with success (the empty rollback) and refuses that try when it finally arrives (409).
func ExampleBarrier_Handler() {
	ctx := context.Background()
	pool, drop := exampleDB(ctx)
	defer drop()

	// The secret shared with the coordinators (at least 16 bytes; from your secret store, never
	// from the code). The handler refuses requests not signed with it.
	secret := rand.Text()
	bar, err := participant.NewBarrier(pool, participant.WithSecrets(secret)) // table txkit_barrier, rows kept 7 days
	if err != nil {
		panic(err)
	}
	if err := bar.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `create table stock (item text primary key, available int not null, reserved int not null);
		insert into stock values ('apple', 10, 0)`); err != nil {
		panic(err)
	}

	// The business code runs in the barrier's transaction, at most once per gid, branch and op.
	stock := func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		var p struct {
			Item string `json:"item"`
			Qty  int    `json:"qty"`
		}
		if err := json.Unmarshal(req.Payload, &p); err != nil {
			return fmt.Errorf("payload: %w: %w", participant.ErrBadRequest, err)
		}
		var sql string
		switch req.Op {
		case participant.OpTry:
			sql = `update stock set available = available - $2, reserved = reserved + $2 where item = $1 and available >= $2`
		case participant.OpConfirm:
			sql = `update stock set reserved = reserved - $2 where item = $1`
		case participant.OpCancel:
			sql = `update stock set available = available + $2, reserved = reserved - $2 where item = $1`
		default:
			return fmt.Errorf("stock: no %s: %w", req.Op, participant.ErrBadRequest)
		}
		tag, err := tx.Exec(ctx, sql, p.Item, p.Qty)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("not enough %s: %w", p.Item, participant.ErrRefused)
		}
		return nil
	}
	mux := http.NewServeMux()
	// The coordinator posts every TCC op of the branch to this one route; the handler takes no
	// other op.
	mux.Handle("POST /stock", bar.Handler(stock,
		participant.WithAllowedOps(participant.OpTry, participant.OpConfirm, participant.OpCancel)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// What a coordinator sends, signed with the shared secret (give the coordinator the same
	// client: coordinator.WithHTTPClient).
	client, err := participant.NewSigningClient(secret, srv.Client())
	if err != nil {
		panic(err)
	}
	coord := participant.HTTP{URL: srv.URL + "/stock", Client: client}
	send := func(gid string, op participant.Op, qty int, note string) {
		err := coord.Do(ctx, participant.Request{GID: gid, Branch: "stock", Op: op,
			Payload: json.RawMessage(fmt.Sprintf(`{"item":"apple","qty":%d}`, qty))})
		switch {
		case errors.Is(err, participant.ErrRefused):
			fmt.Printf("%s %-7s 409 %s\n", gid, op, note)
		case err != nil:
			panic(err)
		default:
			fmt.Printf("%s %-7s 200 %s\n", gid, op, note)
		}
	}
	send("order-1", participant.OpTry, 3, "reserved 3")
	send("order-1", participant.OpTry, 3, "retried: nothing reserved twice")
	send("order-1", participant.OpConfirm, 3, "confirmed")
	send("order-2", participant.OpTry, 20, "not enough apples")
	send("order-2", participant.OpCancel, 20, "empty rollback: the refused try left nothing")
	send("order-3", participant.OpCancel, 2, "empty rollback: the cancel overtook its try")
	send("order-3", participant.OpTry, 2, "hanging try refused: nothing reserved")

	var available, reserved int
	if err := pool.QueryRow(ctx, `select available, reserved from stock where item = 'apple'`).Scan(&available, &reserved); err != nil {
		panic(err)
	}
	fmt.Printf("apple: %d available, %d reserved\n", available, reserved)
	// Output:
	// order-1 try     200 reserved 3
	// order-1 try     200 retried: nothing reserved twice
	// order-1 confirm 200 confirmed
	// order-2 try     409 not enough apples
	// order-2 cancel  200 empty rollback: the refused try left nothing
	// order-3 cancel  200 empty rollback: the cancel overtook its try
	// order-3 try     409 hanging try refused: nothing reserved
	// apple: 7 available, 0 reserved
}

// A payment service is a three-phase-commit participant over HTTP: cancommit checks the balance,
// precommit freezes the amount, docommit debits it, abort unfreezes it. The agent remembers every
// pre-committed branch and, when the coordinator goes silent past the timeout, asks the
// coordinator's decision log what to do.
func ExampleAgent() {
	ctx := context.Background()
	pool, drop := exampleDB(ctx)
	defer drop()
	if _, err := pool.Exec(ctx, `create table account (id text primary key, balance int not null, frozen int not null);
		insert into account values ('alice', 100, 0)`); err != nil {
		panic(err)
	}

	secret := rand.Text()
	bar, err := participant.NewBarrier(pool, participant.WithSecrets(secret))
	if err != nil {
		panic(err)
	}
	pay := func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		var p struct {
			Amount int `json:"amount"`
		}
		if err := json.Unmarshal(req.Payload, &p); err != nil {
			return fmt.Errorf("payload: %w: %w", participant.ErrBadRequest, err)
		}
		var sql string
		switch req.Op {
		case participant.OpCanCommit: // read-only: nothing is locked or written
			var ok bool
			if err := tx.QueryRow(ctx, `select balance - frozen >= $1 from account where id = 'alice'`, p.Amount).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("insufficient funds: %w", participant.ErrRefused)
			}
			return nil
		case participant.OpPreCommit:
			sql = `update account set frozen = frozen + $1 where id = 'alice' and balance - frozen >= $1`
		case participant.OpDoCommit:
			sql = `update account set balance = balance - $1, frozen = frozen - $1 where id = 'alice'`
		case participant.OpAbort:
			sql = `update account set frozen = frozen - $1 where id = 'alice'`
		}
		tag, err := tx.Exec(ctx, sql, p.Amount)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("insufficient funds: %w", participant.ErrRefused)
		}
		return err
	}
	// The coordinator's decision log: in production the threepc.Coordinator, which answers from
	// its log (and records the abort of a transaction still undecided).
	decisionLog := participant.DeciderFunc(func(ctx context.Context, gid string) (participant.Outcome, error) {
		if gid == "order-3" {
			return participant.OutcomeCommit, nil
		}
		return participant.OutcomeAbort, nil
	})
	agent, err := participant.NewAgent(bar, pay,
		participant.WithDecider(decisionLog),           // consult-log, the default termination mode
		participant.WithAgentTimeout(time.Microsecond)) // 10 s by default; here every branch times out at once
	if err != nil {
		panic(err)
	}
	if err := agent.Migrate(ctx); err != nil { // the barrier's table and txkit_3pc_agent
		panic(err)
	}
	// go agent.Run(ctx) would end timed-out branches every 500 ms; the example calls Pass itself.

	srv := httptest.NewServer(agent.Handler()) // cancommit, precommit, docommit, abort; signed
	defer srv.Close()
	client, err := participant.NewSigningClient(secret, srv.Client())
	if err != nil {
		panic(err)
	}
	coord := participant.HTTP{URL: srv.URL, Client: client}
	send := func(gid string, op participant.Op, amount int) {
		err := coord.Do(ctx, participant.Request{GID: gid, Branch: "pay", Op: op,
			Payload: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, amount))})
		switch {
		case errors.Is(err, participant.ErrRefused):
			fmt.Printf("%s %-9s 409\n", gid, op)
		case err != nil:
			fmt.Printf("%s %-9s %v\n", gid, op, strings.TrimPrefix(err.Error(), fmt.Sprintf("participant: %s %s/pay at %s: ", op, gid, srv.URL)))
		default:
			fmt.Printf("%s %-9s 200\n", gid, op)
		}
	}
	send("order-1", participant.OpCanCommit, 30)
	send("order-1", participant.OpPreCommit, 30)
	send("order-1", participant.OpDoCommit, 30)
	send("order-2", participant.OpCanCommit, 500) // no: the coordinator aborts
	send("order-2", participant.OpAbort, 500)     // nothing was pre-committed: an empty rollback
	send("order-2", participant.OpPreCommit, 500) // a late precommit is refused for good
	send("order-9", participant.OpDoCommit, 10)   // never pre-committed here: 400
	send("order-3", participant.OpPreCommit, 20)  // then the coordinator goes silent
	send("order-4", participant.OpPreCommit, 5)   // likewise

	pass, err := agent.Pass(ctx) // the log says: order-3 committed, order-4 aborted
	if err != nil {
		panic(err)
	}
	fmt.Printf("timed out: %d, committed %d, aborted %d\n", pass.Found, pass.Committed, pass.Aborted)
	send("order-3", participant.OpDoCommit, 20) // the coordinator is back: a duplicate

	var balance, frozen int
	if err := pool.QueryRow(ctx, `select balance, frozen from account where id = 'alice'`).Scan(&balance, &frozen); err != nil {
		panic(err)
	}
	fmt.Printf("alice: balance %d, frozen %d\n", balance, frozen)
	// Output:
	// order-1 cancommit 200
	// order-1 precommit 200
	// order-1 docommit  200
	// order-2 cancommit 409
	// order-2 abort     200
	// order-2 precommit 409
	// order-9 docommit  HTTP 400: participant: docommit order-9/pay: docommit for gid order-9 branch pay that was never pre-committed here: participant: bad request: unknown transaction
	// order-3 precommit 200
	// order-4 precommit 200
	// timed out: 2, committed 1, aborted 1
	// order-3 docommit  200
	// alice: balance 50, frozen 0
}
