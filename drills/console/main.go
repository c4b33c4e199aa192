// Command console runs the tcc-order example with the operator console beside it, for a person to
// look at (`make console`): it builds and starts the example's services (stock, account and two
// order instances) in a schema of its own, places orders — TCC and saga, some refused so that they
// are cancelled or compensated — gives the outbox of the same schema a few messages, one of them
// made dead by a relay whose broker refuses everything, then runs an outbox relay to the real
// RocketMQ and `txkit serve` (the admin API and the web console) over that schema, with the order
// services' recovery elections, the relay's election and the first order instance's /metrics.
// It prints the console's URL and the token its sign-in asks for, and runs until Ctrl-C;
// then it stops everything and drops the schema.
//
// The servers come from `make up` (TXKIT_PG_URL, TXKIT_ZK, TXKIT_ROCKETMQ_NAMESRV).
package main

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

const (
	dbOrder   = "txkit_order"
	dbStock   = "txkit_stock"
	dbAccount = "txkit_account"
)

type config struct {
	listen  string
	orders  int
	pg, zk  string
	namesrv string
	dir     string
}

func main() {
	var c config
	flag.StringVar(&c.listen, "listen", "127.0.0.1:8089", "address of the console (txkit serve -listen)")
	flag.IntVar(&c.orders, "orders", 40, "orders to place")
	flag.Parse()
	c.pg, c.zk, c.namesrv = os.Getenv("TXKIT_PG_URL"), os.Getenv("TXKIT_ZK"), os.Getenv("TXKIT_ROCKETMQ_NAMESRV")
	home := exapp.Env("TXKIT_HOME", ".txkit")
	c.dir = filepath.Join(home, "console")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "console:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, c config) error {
	if c.pg == "" || c.zk == "" || c.namesrv == "" {
		return errors.New("TXKIT_PG_URL, TXKIT_ZK and TXKIT_ROCKETMQ_NAMESRV must be set: run `make console`, or `make up` and eval \"$(deploy/local/env)\"")
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	logf("building the tcc-order services and txkit into %s", c.dir)
	if err := drillkit.Build(ctx, c.dir, "tcc-order", "order", "stock", "account"); err != nil {
		return err
	}
	root, err := drillkit.ModuleRoot(ctx)
	if err != nil {
		return err
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(c.dir, "txkit"), "./cmd/txkit")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build txkit: %w\n%s", err, out)
	}
	if os.Getenv("TXKIT_TCC_ORDER_SECRET") == "" { // the key the three services share
		if err := os.Setenv("TXKIT_TCC_ORDER_SECRET", crand.Text()); err != nil {
			return err
		}
	}
	schema := "console_" + strings.ToLower(crand.Text()[:8])
	elect := "/txkit-console/" + schema
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := drillkit.DropSchema(cctx, c.pg, schema, dbOrder, dbStock, dbAccount); err != nil {
			logf("clean-up: %v", err)
		}
	}()

	var procs []*drillkit.Proc
	defer func() { drillkit.Stop(procs...) }()
	start := func(name, bin string, args ...string) (*drillkit.Proc, error) {
		p, err := drillkit.Start(ctx, name, filepath.Join(c.dir, bin), args, filepath.Join(c.dir, name+".log"))
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		return p, nil
	}
	stock, err := start("stock", "stock", "-pg", c.pg, "-db", dbStock, "-schema", schema, "-seed", "sku-1=60,sku-2=60,sku-3=60")
	if err != nil {
		return err
	}
	account, err := start("account", "account", "-pg", c.pg, "-db", dbAccount, "-schema", schema, "-seed", "alice=2000,bob=2000,carol=300")
	if err != nil {
		return err
	}
	var order []string
	for i := 1; i <= 2; i++ {
		id := fmt.Sprintf("order-%d", i)
		p, err := start(id, "order", "-pg", c.pg, "-db", dbOrder, "-schema", schema, "-zk", c.zk, "-id", id,
			"-election", elect, "-stock", "http://"+stock.Addr, "-account", "http://"+account.Addr)
		if err != nil {
			return err
		}
		order = append(order, "http://"+p.Addr)
	}
	logf("services up in schema %s (logs in %s)", schema, c.dir)
	counts := placeOrders(ctx, order, c.orders)
	var placed []string
	for _, st := range slices.Sorted(maps.Keys(counts)) {
		placed = append(placed, fmt.Sprintf("%d %s", counts[st], st))
	}
	logf("%d orders placed: %s", c.orders, strings.Join(placed, ", "))

	pool, err := exapp.Pool(ctx, c.pg, dbOrder, schema, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	relayErr, err := outboxWithDeadMessage(ctx, c, pool, schema, elect+"/relay")
	if err != nil {
		return err
	}

	token := crand.Text()
	tokens := filepath.Join(c.dir, "tokens")
	if err := os.WriteFile(tokens, []byte("operator "+token+"\n"), 0o600); err != nil {
		return err
	}
	pgURL, err := exapp.DatabaseURL(c.pg, dbOrder, "", 0)
	if err != nil {
		return err
	}
	args := []string{"serve", "-listen", c.listen, "-schema", schema, "-token-file", tokens, "-zk", c.zk,
		"-election", "tcc recovery=" + elect + "/tcc", "-election", "saga recovery=" + elect + "/saga", "-election", "outbox relay=" + elect + "/relay"}
	for _, o := range order { // every instance's figures, summed
		args = append(args, "-metrics-url", o+"/metrics")
	}
	serve := exec.CommandContext(ctx, filepath.Join(c.dir, "txkit"), args...)
	serve.Env = append(os.Environ(), "TXKIT_PG_URL="+pgURL) // not on the command line
	serve.Stdout, serve.Stderr = os.Stdout, os.Stderr
	serve.Cancel = func() error { return serve.Process.Signal(syscall.SIGTERM) }
	serve.WaitDelay = 15 * time.Second
	if err := serve.Start(); err != nil {
		return fmt.Errorf("start txkit serve: %w", err)
	}
	fmt.Printf("\nconsole: http://%s/\ntoken:   %s   (the console's sign-in asks for it once; actor \"operator\" reads, reveals, requeues and redelivers)\n", c.listen, token)
	fmt.Printf("orders:  POST %s/orders places more, e.g.\n         curl -s -XPOST %s/orders -d '{\"sku\":\"sku-1\",\"qty\":1,\"account\":\"carol\",\"amount\":5000,\"mode\":\"saga\"}'\n", order[0], order[0])
	fmt.Printf("Ctrl-C stops everything and drops schema %s.\n\n", schema)
	serveErr := serve.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return errors.Join(fmt.Errorf("txkit serve exited: %w", serveErr), relayErr())
}

// placeOrders places n orders through the order instances in turn — TCC and saga alternately,
// one in five asking more stock than exists, one in seven spending more than carol has — and
// counts the answers by status.
func placeOrders(ctx context.Context, order []string, n int) map[string]int {
	counts := map[string]int{}
	client := &http.Client{Timeout: 30 * time.Second}
	skus, accts := []string{"sku-1", "sku-2", "sku-3"}, []string{"alice", "bob", "carol"}
	for i := range n {
		o := map[string]any{"sku": skus[i%3], "qty": 1 + i%3, "account": accts[i%3], "amount": 10 * (1 + i%3), "mode": []string{"tcc", "saga"}[i%2]}
		switch {
		case i%5 == 4:
			o["qty"] = 1_000_000
		case i%7 == 6:
			o["account"], o["amount"] = "carol", 1_000_000
		}
		body, _ := json.Marshal(o)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, order[i%len(order)]+"/orders", strings.NewReader(string(body)))
		resp, err := client.Do(req)
		if err != nil {
			counts["unanswered"]++
			continue
		}
		var out struct{ Status string }
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		counts[out.Status]++
	}
	return counts
}

// refusing is the broker of the first relay: it refuses every message.
type refusing struct{}

func (refusing) Publish(context.Context, outbox.Message) error {
	return errors.New("broker unreachable: connection refused (the demo's first relay)")
}

// outboxWithDeadMessage migrates the outbox of schema, enqueues three messages, makes the first
// one dead with a relay whose broker refuses everything, then leaves a relay to the real RocketMQ
// running (it publishes the other two, and whatever the console requeues). The returned func
// gives that relay's error once ctx has ended.
func outboxWithDeadMessage(ctx context.Context, c config, pool *pgxpool.Pool, schema, path string) (func() error, error) {
	ob, err := outbox.New(pool, outbox.WithTable(schema, ""))
	if err != nil {
		return nil, err
	}
	if err := ob.Migrate(ctx); err != nil {
		return nil, err
	}
	auth, err := exapp.ZKAuth() // TXKIT_ZK_AUTH
	if err != nil {
		return nil, err
	}
	sess, err := zklock.NewSession(ctx, strings.Split(c.zk, ","), zklock.WithSessionTimeout(4*time.Second), auth)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { _ = sess.Close() })
	el, err := zklock.NewElector(sess, path, "relay-refusing")
	if err != nil {
		return nil, err
	}
	for i, ev := range []string{"order.cancelled", "order.confirmed", "order.confirmed"} {
		body := fmt.Sprintf(`{"event":%q,"n":%d}`, ev, i)
		if _, err := ob.Enqueue(ctx, pool, outbox.Message{Topic: "txkit-console-demo", Key: fmt.Sprintf("order-%d", i), Body: []byte(body)}); err != nil {
			return nil, err
		}
		if i == 0 { // only the first goes to the refusing relay
			failing, err := outbox.NewRelay(ob, refusing{}, outbox.WithElector(el), outbox.WithRetry(3, 10*time.Millisecond, 50*time.Millisecond),
				outbox.WithSchedule("@every 100ms", 128))
			if err != nil {
				return nil, err
			}
			if err := runUntilDead(ctx, ob, pool, failing); err != nil {
				return nil, err
			}
		}
	}
	pub, err := rocketmq.NewPublisher(ctx, strings.Split(c.namesrv, ","))
	if err != nil {
		return nil, err
	}
	el, err = zklock.NewElector(sess, path, "relay-rocketmq")
	if err != nil {
		return nil, err
	}
	relay, err := outbox.NewRelay(ob, pub, outbox.WithElector(el))
	if err != nil {
		_ = pub.Close()
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		err := relay.Run(ctx)
		done <- errors.Join(err, pub.Close())
	}()
	logf("outbox: one message dead (refused three times), the others published by a relay to RocketMQ at %s", c.namesrv)
	return func() error { return <-done }, nil
}

// runUntilDead runs r until the outbox has a dead message (30 s at most), then stops it.
func runUntilDead(ctx context.Context, ob *outbox.Outbox, pool *pgxpool.Pool, r *outbox.Relay) error {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if _, dead, err := ob.Backlog(ctx, pool); err != nil || dead > 0 {
			return err
		}
		if err := exapp.Pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return errors.New("no outbox message dead after 30s")
}
