package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/inbox"
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
		notify.WithTable(schema, ""))
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
	store, _ := idempotency.New(pool, idempotency.WithTable(schema, ""))
	if err := store.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	in, err := inbox.New(pool, store, "shop", []string{secret}, func(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
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

// ExampleWithPartitions runs two notifier instances that share the deliveries: the receivers are
// split into 2 partitions, each with its own ZooKeeper election, and each instance leads one
// (ContenderCount counts the instances from the elections).
func ExampleWithPartitions() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	zkServers := os.Getenv(testenv.EnvZK) // set by `make test`
	if zkServers == "" {
		fmt.Println(testenv.EnvZK + " is not set: start the servers with `make up`")
		return
	}
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "example_")
	if !ok {
		return
	}
	defer done()
	name := schemas[0]

	// The receivers: they acknowledge every delivery.
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("success")) }))
	defer shop.Close()
	const secret = "example-secret-0123456789"
	receivers := []notify.Receiver{{Name: "shop", URL: shop.URL + "/shop", Secrets: []string{secret}, Echo: "success"},
		{Name: "bank", URL: shop.URL + "/bank", Secrets: []string{secret}, Echo: "success"}}
	base := "/txkit-example/" + name
	paths := []string{base + "/p0", base + "/p1"}

	// Two instances, as two processes would run them: a ZooKeeper session and a Notifier each.
	var first *notify.Notifier
	var runs sync.WaitGroup
	var sessions []*zklock.Session
	defer func() { // stop the instances, then delete the elections' nodes and close the sessions
		cancel()
		runs.Wait()
		for _, sess := range sessions {
			for _, p := range append(paths, base) {
				_ = sess.Conn().Delete(p, -1)
			}
			_ = sess.Close()
		}
	}()
	for _, id := range []string{"instance-a", "instance-b"} {
		sess, err := zklock.NewSession(ctx, strings.Split(zkServers, ","), zklock.WithDigestAuth(zkenv.Digest()))
		if err != nil {
			fmt.Println(err)
			return
		}
		sessions = append(sessions, sess)
		n, err := notify.New(pool, receivers, notify.WithTable(name, ""), notify.WithPlainHTTP(),
			notify.WithPartitions(2, func(p int) (lock.Elector, error) { return zklock.NewElector(sess, paths[p], id) },
				notify.ContenderCount(sess.Inspector(), paths...)))
		if err != nil {
			fmt.Println(err)
			return
		}
		if err := n.Migrate(ctx); err != nil {
			fmt.Println(err)
			return
		}
		if first == nil {
			first = n
		}
		runs.Go(func() {
			if err := n.Run(ctx); err != nil {
				fmt.Println(err)
			}
		})
	}

	var ids []uuid.UUID
	for _, rcv := range []string{"shop", "bank"} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, err := first.Enqueue(ctx, tx, notify.Notification{Receiver: rcv, Key: "order-42", Payload: json.RawMessage(`{"paid":true}`)})
			ids = append(ids, id)
			return err
		})
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	for _, id := range ids {
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, err := first.Get(ctx, id)
			if err == nil && r.Status == notify.StatusDelivered {
				fmt.Println(r.Receiver, r.Status)
				break
			}
			if time.Now().After(deadline) {
				fmt.Println("not delivered:", id, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Output:
	// shop delivered
	// bank delivered
}
