package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/outbox"
	txrocketmq "github.com/txkit/txkit/rocketmq"
)

// OrderLoad is the workload "order": per-key order through the relay on the DLedger group. Every
// Every, one transaction enqueues the next message of each of Keys keys in the outbox; a relay
// (electing on Lock) publishes them to a topic of the run's own on the group, and an orderly,
// idempotent consumer applies them, recording the order it applied them in. It runs in the drill's
// own process, beside the faults, until the drill stops it; then it waits for every message to be
// applied and counts: messages applied twice, messages missing, order violations (a message of a
// key applied after a later one of that key) — all 0 expected — and the redeliveries the
// idempotency claim suppressed.
type OrderLoad struct {
	Namesrv, Brokers string        // the DLedger group's name server and brokers (the topic is created on each)
	PG               string        // base PostgreSQL URL (database txkit_test; the HA cluster's with -pg-ha)
	Lock             string        // lock backend of the relay's election (exapp.LockKinds)
	SessionTimeout   time.Duration // its session timeout or lease TTL
	Keys             int           // keys, each with a sequence of its own (default 8)
	Every            time.Duration // one message per key this often (default 200 ms)
	Dir              string        // the workload's log (order.log)
}

// orderRow is one applied message: its key and its place in the key's sequence.
type orderRow struct {
	key string
	seq int
}

// orderCount counts, over rows in the order they were applied, the messages applied more than
// once and the order violations: a message applied after a later message of its key.
func orderCount(rows []orderRow) (once, twice, violations int, first string) {
	seen, top := map[orderRow]bool{}, map[string]int{}
	for _, r := range rows {
		if seen[r] {
			twice++
			continue
		}
		seen[r] = true
		once++
		if last, ok := top[r.key]; ok && r.seq < last {
			violations++
			if first == "" {
				first = fmt.Sprintf("%s seq %d applied after seq %d", r.key, r.seq, last)
			}
		}
		top[r.key] = max(top[r.key], r.seq)
	}
	return once, twice, violations, first
}

// Run runs the workload until stop is closed, then drains and checks it; it returns its report,
// and an error when a message was applied twice, went missing or broke its key's order.
func (o OrderLoad) Run(ctx context.Context, stop <-chan struct{}) (string, error) {
	if o.Keys <= 0 {
		o.Keys = 8
	}
	if o.Every <= 0 {
		o.Every = 200 * time.Millisecond
	}
	id := uuid.NewString()[:8]
	schema, topic, group := "ha_order_"+id, "txkit-ha-order-"+id, "txkit-ha-order-"+id
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return "", err
	}
	logf, err := os.Create(filepath.Join(o.Dir, "order.log"))
	if err != nil {
		return "", err
	}
	defer logf.Close()
	log := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ns := strings.Split(o.Namesrv, ",")

	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
	if err != nil {
		return "", fmt.Errorf("rocketmq admin: %w", err)
	}
	defer adm.Close()
	if err := createTopic(ctx, adm, o.Brokers, topic, 4); err != nil {
		return "", err
	}
	defer deleteTopic(adm, ns, o.Brokers, topic)
	pool, err := exapp.Pool(ctx, o.PG, "txkit_test", schema, 20)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = drillkit.DropSchema(cctx, o.PG, schema, "txkit_test")
	}()
	if _, err := pool.Exec(ctx, `create table rounds (seq int primary key);
		create table applied (n bigserial, id uuid not null, key text not null, seq int not null,
			enqueued_at timestamptz not null, applied_at timestamptz not null default clock_timestamp())`); err != nil {
		return "", err
	}
	store, err := idempotency.New(pool, idempotency.WithLogger(log))
	if err != nil {
		return "", err
	}
	ob, err := outbox.New(pool)
	if err != nil {
		return "", err
	}
	for _, m := range []func(context.Context) error{store.Migrate, ob.Migrate} {
		if err := m(ctx); err != nil {
			return "", err
		}
	}
	locks, err := exapp.OpenLocks(ctx, o.Lock, log, exapp.WithLockTTL(o.SessionTimeout), exapp.WithZKRoot("/txkit-ha-order-"+id))
	if err != nil {
		return "", err
	}
	defer func() {
		_ = locks.DeleteTree(context.WithoutCancel(ctx), "")
		_ = locks.Close()
	}()
	el, err := locks.Elector("relay", "relay-1")
	if err != nil {
		return "", err
	}
	pub, err := txrocketmq.NewPublisher(ctx, ns, txrocketmq.WithLogger(log))
	if err != nil {
		return "", err
	}
	defer pub.Close()
	// Publish retries never give up (a dead message would be a missing one), 100 ms to 1 s apart.
	relay, err := outbox.NewRelay(ob, pub, outbox.WithElector(el), outbox.WithSchedule("@every 100ms", 128),
		outbox.WithRetry(1_000_000, 100*time.Millisecond, time.Second), outbox.WithLogger(log))
	if err != nil {
		return "", err
	}
	cons, err := txrocketmq.NewConsumer(ns, group, topic, pool, store, func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		_, err := tx.Exec(ctx, `insert into applied (id, key, seq, enqueued_at) values ($1, $2, $3::int, $4::timestamptz)`,
			msg.ID, msg.Key, msg.Headers["seq"], msg.Headers["at"])
		return err
	}, txrocketmq.WithOrderly(time.Second), txrocketmq.WithLogger(log))
	if err != nil {
		return "", err
	}
	rctx, stopServices := context.WithCancel(ctx)
	defer stopServices()
	done := make(chan error, 2)
	go func() { done <- relay.Run(rctx) }()
	go func() { done <- cons.Run(rctx) }()

	// The load: round seq enqueues message seq of every key in one transaction, with the round's
	// row; a round whose commit was not acknowledged (a PostgreSQL failover) is tried again, and
	// its row's unique violation says it had committed.
	rounds := 0
	t := time.NewTicker(o.Every)
	defer t.Stop()
load:
	for {
		select {
		case <-stop:
			break load
		case <-ctx.Done():
			return "", ctx.Err()
		case err := <-done:
			return "", fmt.Errorf("relay or consumer ended: %w", err)
		case <-t.C:
		}
		at := time.Now().UTC().Format(time.RFC3339Nano)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `insert into rounds values ($1)`, rounds); err != nil {
				return err
			}
			for k := range o.Keys {
				key := "key-" + strconv.Itoa(k)
				if _, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: topic, Key: key, Body: []byte(key + "/" + strconv.Itoa(rounds)),
					Headers: map[string]string{"seq": strconv.Itoa(rounds), "at": at}}); err != nil {
					return err
				}
			}
			return nil
		})
		var pe *pgconn.PgError
		if err == nil || errors.As(err, &pe) && pe.Code == "23505" {
			rounds++
		} else {
			log.Warn("enqueue failed; the round is tried again", "seq", rounds, "err", err)
		}
	}

	// Drained: every round's messages applied (the idempotency claim keeps a redelivery out).
	want := rounds * o.Keys
	var applied int
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := pool.QueryRow(ctx, `select count(distinct (key, seq)) from applied`).Scan(&applied)
		if err == nil && applied >= want {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		if err := exapp.Pause(ctx, 100*time.Millisecond); err != nil {
			return "", err
		}
	}
	stopServices()
	for range 2 {
		<-done
	}
	var rows []orderRow
	qr, err := pool.Query(ctx, `select key, seq from applied order by n`)
	if err != nil {
		return "", err
	}
	for qr.Next() {
		var r orderRow
		if err := qr.Scan(&r.key, &r.seq); err != nil {
			return "", err
		}
		rows = append(rows, r)
	}
	if err := qr.Err(); err != nil {
		return "", err
	}
	once, twice, violations, first := orderCount(rows)
	var p50, p99 float64
	if err := pool.QueryRow(ctx, `select coalesce(percentile_cont(0.5) within group (order by ms), 0), coalesce(percentile_cont(0.99) within group (order by ms), 0)
		from (select extract(epoch from applied_at - enqueued_at) * 1000 as ms from applied) d`).Scan(&p50, &p99); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "order report (topic %s on the DLedger group, relay electing on %s)\n", topic, o.Lock)
	fmt.Fprintf(&b, "ordered messages:       %d keys × %d rounds = %d enqueued, %d applied, %d applied twice, %d missing\n",
		o.Keys, rounds, want, once, twice, want-once)
	fmt.Fprintf(&b, "order violations:       %d (a message of a key applied after a later one of that key)%s\n", violations, cond(first != "", ": first "+first))
	fmt.Fprintf(&b, "redeliveries:           %d suppressed by the idempotency claim\n", cons.Stats().Duplicates)
	fmt.Fprintf(&b, "end-to-end latency:     p50 %v, p99 %v (enqueue → applied)\n", msDur(p50), msDur(p99))
	var errs []error
	if want == 0 {
		errs = append(errs, errors.New("no message enqueued"))
	}
	if twice != 0 || violations != 0 || once != want {
		errs = append(errs, fmt.Errorf("%d applied twice, %d order violations, %d missing", twice, violations, want-once))
	}
	return b.String(), errors.Join(errs...)
}

func cond(ok bool, s string) string {
	if ok {
		return s
	}
	return ""
}

func msDur(ms float64) time.Duration {
	return time.Duration(ms * float64(time.Millisecond)).Round(100 * time.Microsecond)
}

// createTopic creates topic with queues read and write queues on each of brokers.
func createTopic(ctx context.Context, adm admin.Admin, brokers, topic string, queues int) error {
	for _, b := range strings.Split(brokers, ",") {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := adm.CreateTopic(cctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b),
			admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues))
		cancel()
		if err != nil {
			return fmt.Errorf("create topic %s on %s: %w", topic, b, err)
		}
	}
	return nil
}

// deleteTopic deletes topic from each of brokers (a clean-up: errors are ignored).
func deleteTopic(adm admin.Admin, ns []string, brokers, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, b := range strings.Split(brokers, ",") {
		_ = adm.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(b), admin.WithNameSrvAddr(ns))
	}
}
