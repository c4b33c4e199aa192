package idempotency_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// A consumer adds points once per message, however often the message is delivered: the claim and
// the update commit together.
func Example() {
	ctx := context.Background()
	pool, drop := testenv.ExamplePool(ctx)
	defer drop()

	store, err := idempotency.New(pool)
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `create table accounts (id text primary key, points int not null)`); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `insert into accounts values ('alice', 0)`); err != nil {
		panic(err)
	}

	handle := func(msgID, account string, points int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			first, err := store.Claim(ctx, tx, "points", msgID)
			if err != nil {
				return err
			}
			if !first {
				fmt.Printf("%s: duplicate, skipped\n", msgID)
				return nil
			}
			_, err = tx.Exec(ctx, `update accounts set points = points + $1 where id = $2`, points, account)
			fmt.Printf("%s: added %d points\n", msgID, points)
			return err
		})
	}
	for _, id := range []string{"msg-1", "msg-2", "msg-1"} { // msg-1 is delivered twice
		if err := handle(id, "alice", 10); err != nil {
			panic(err)
		}
	}
	var points int
	if err := pool.QueryRow(ctx, `select points from accounts where id = 'alice'`).Scan(&points); err != nil {
		panic(err)
	}
	fmt.Println("alice has", points, "points")
	// Output:
	// msg-1: added 10 points
	// msg-2: added 10 points
	// msg-1: duplicate, skipped
	// alice has 20 points
}

// An HTTP handler honours the Idempotency-Key header: a retry gets the first response back, and the
// same key with a different body is refused.
func ExampleStore_Begin() {
	ctx := context.Background()
	pool, drop := testenv.ExamplePool(ctx)
	defer drop()

	store, err := idempotency.New(pool, idempotency.WithRetention(24*time.Hour, "@every 1m"))
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}

	var orders int
	createOrder := func(idemKey, body string) (string, error) {
		fp := sha256.Sum256([]byte("POST /orders\n" + body))
		var resp string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rec, err := store.Begin(ctx, tx, "POST /orders", idemKey, fp[:])
			if err != nil {
				return err
			}
			if !rec.New {
				resp = string(rec.Result) + " (replayed)"
				return nil
			}
			orders++ // the real work would write the order in tx
			resp = fmt.Sprintf("201 order %d for %s", orders, body)
			return store.Complete(ctx, tx, "POST /orders", idemKey, []byte(resp))
		})
		return resp, err
	}

	for _, req := range []struct{ key, body string }{
		{"k-1", "2 apples"},
		{"k-1", "2 apples"}, // the client retries after a timeout
		{"k-1", "3 pears"},  // the client reuses the key by mistake
	} {
		resp, err := createOrder(req.key, req.body)
		switch {
		case errors.Is(err, idempotency.ErrFingerprintMismatch):
			fmt.Println("422 key reused with another request")
		case err != nil:
			panic(err)
		default:
			fmt.Println(resp)
		}
	}
	// Output:
	// 201 order 1 for 2 apples
	// 201 order 1 for 2 apples (replayed)
	// 422 key reused with another request
}

// Purge deletes expired keys in one pass; Run does the same on a cron schedule until its ctx ends.
func ExampleStore_Purge() {
	ctx := context.Background()
	pool, drop := testenv.ExamplePool(ctx)
	defer drop()

	store, err := idempotency.New(pool, idempotency.WithRetention(time.Microsecond, "@every 1m"))
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	for _, key := range []string{"a", "b", "c"} {
		if _, err := store.Claim(ctx, pool, "demo", key); err != nil {
			panic(err)
		}
	}
	n, err := store.Purge(ctx, pool)
	if err != nil {
		panic(err)
	}
	fmt.Println("purged", n, "expired keys")
	// Output:
	// purged 3 expired keys
}
