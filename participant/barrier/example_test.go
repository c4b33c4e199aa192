package barrier_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// A stock service is a TCC participant over HTTP: try reserves, confirm takes the reservation,
// cancel releases it. The barrier makes retries harmless, answers a cancel that overtook its try
// with success (the empty rollback) and refuses that try when it finally arrives (409).
func ExampleBarrier_Handler() {
	ctx := context.Background()
	pool, drop := testenv.ExamplePool(ctx)
	defer drop()

	// The secret shared with the coordinators (at least 16 bytes; from your secret store, never
	// from the code). The handler refuses requests not signed with it.
	secret := rand.Text()
	bar, err := barrier.New(pool, barrier.WithSecrets(secret)) // table txkit_barrier, rows kept 7 days
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
		barrier.WithAllowedOps(participant.OpTry, participant.OpConfirm, participant.OpCancel)))
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
