package agent_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/threepc/agent"
)

// A payment service is a three-phase-commit participant over HTTP: cancommit checks the balance,
// precommit freezes the amount, docommit debits it, abort unfreezes it. The agent remembers every
// pre-committed branch and, when the coordinator goes silent past the timeout, asks the
// coordinator's decision log what to do.
func ExampleAgent() {
	ctx := context.Background()
	pool, drop := testenv.ExamplePool(ctx)
	defer drop()
	if _, err := pool.Exec(ctx, `create table account (id text primary key, balance int not null, frozen int not null);
		insert into account values ('alice', 100, 0)`); err != nil {
		panic(err)
	}

	secret := rand.Text()
	bar, err := barrier.New(pool, barrier.WithSecrets(secret))
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
	decisionLog := agent.DeciderFunc(func(ctx context.Context, gid string) (threepc.Outcome, error) {
		if gid == "order-3" {
			return threepc.OutcomeCommit, nil
		}
		return threepc.OutcomeAbort, nil
	})
	a, err := agent.New(bar, decisionLog, pay, // consult-log, the default termination mode
		agent.WithTimeout(time.Microsecond, 0)) // 10 s by default; here every branch times out at once
	if err != nil {
		panic(err)
	}
	if err := a.Migrate(ctx); err != nil { // the barrier's table and txkit_3pc_agent
		panic(err)
	}
	// go a.Run(ctx) would end timed-out branches every 500 ms; the example calls Pass itself.

	srv := httptest.NewServer(a.Handler()) // cancommit, precommit, docommit, abort; signed
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

	pass, err := a.Pass(ctx) // the log says: order-3 committed, order-4 aborted
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
