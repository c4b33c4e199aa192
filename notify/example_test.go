package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/notify"
)

// Example records a recharge's result with its notification in one transaction, then shows the
// receiver's side of a lost notification: it asks the sender's query API and applies the result
// once, however often it reconciles. (Delivery itself runs in Notifier.Run, under an elector.)
func Example() {
	ctx := context.Background()
	url := os.Getenv("TXKIT_PG_URL") // set by `make test`
	if url == "" {
		fmt.Println("TXKIT_PG_URL is not set: start the servers with `make up`")
		return
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	schema := "example_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	defer pool.Exec(context.WithoutCancel(ctx), "drop schema if exists "+schema+" cascade") //nolint:errcheck

	// The sender. Secrets are at least 16 bytes; a real one comes from a secret store.
	const secret = "example-secret-0123456789"
	n, err := notify.New(pool, []notify.Receiver{{Name: "shop", URL: "https://shop.invalid/notify", Secrets: []string{secret}}},
		notify.WithSchema(schema))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := n.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	api := httptest.NewServer(n.QueryHandler())
	defer api.Close()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... the recharge's own rows would be written here ...
		_, err := n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: "order-42", Payload: json.RawMessage(`{"amount":100}`)})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	// The receiver, which never got the notification.
	if _, err := pool.Exec(ctx, "create table "+schema+".credits (key text primary key, amount int)"); err != nil {
		fmt.Println(err)
		return
	}
	store, _ := idempotency.New(pool, idempotency.WithSchema(schema))
	if err := store.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	in, err := notify.NewInbox(pool, store, "shop", []string{secret}, func(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
		var p struct{ Amount int }
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "insert into "+schema+".credits values ($1, $2)", d.Key, p.Amount)
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The query API here is an httptest server, plain HTTP on the loopback interface: PlainHTTP
	// allows it. Its answers are signed, and the client believes no other.
	sender := notify.Client{URL: api.URL, Receiver: "shop", Secrets: []string{secret}, PlainHTTP: true}
	for range 2 {
		applied, err := in.Reconcile(ctx, sender, "order-42")
		fmt.Println("reconciled:", applied, err)
	}
	var credited int
	_ = pool.QueryRow(ctx, "select sum(amount) from "+schema+".credits").Scan(&credited)
	fmt.Println("credited:", credited)
	// Output:
	// reconciled: 1 <nil>
	// reconciled: 0 <nil>
	// credited: 100
}
