// Package smoke proves, from Go, that each server txkit depends on works: a ZooKeeper ephemeral
// znode is created, read and deleted; PostgreSQL answers a query and commits a prepared transaction;
// RocketMQ carries a message from a producer to a push consumer. The smoke program (drills/smoke) and
// the foundation's integration tests both run these checks.
package smoke

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// ErrMismatch reports that a server answered, but not with what was written.
var ErrMismatch = errors.New("smoke: read back something other than what was written")

// ZooKeeper connects to servers, creates an ephemeral znode under root (created if absent), reads
// it back and deletes it. It blocks until done or ctx ends.
func ZooKeeper(ctx context.Context, servers []string, root string, log *slog.Logger) error {
	conn, events, err := zk.Connect(servers, 4*time.Second, zk.WithLogger(zkLogger{log}))
	if err != nil {
		return fmt.Errorf("smoke: zookeeper connect %v: %w", servers, err)
	}
	defer conn.Close()
	if err := awaitSession(ctx, events); err != nil {
		return err
	}
	if err := ensurePath(conn, root); err != nil {
		return err
	}
	want := []byte("txkit-smoke-" + uuid.NewString())
	p, err := conn.Create(root+"/ephemeral-", want, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		return fmt.Errorf("smoke: zookeeper create under %s: %w", root, err)
	}
	got, stat, err := conn.Get(p)
	if err != nil {
		return fmt.Errorf("smoke: zookeeper get %s: %w", p, err)
	}
	if string(got) != string(want) {
		return fmt.Errorf("%w: znode %s holds %q, want %q", ErrMismatch, p, got, want)
	}
	if stat.EphemeralOwner != conn.SessionID() {
		return fmt.Errorf("%w: znode %s owned by session %#x, ours is %#x", ErrMismatch, p, stat.EphemeralOwner, conn.SessionID())
	}
	if err := conn.Delete(p, stat.Version); err != nil {
		return fmt.Errorf("smoke: zookeeper delete %s: %w", p, err)
	}
	log.Info("zookeeper ok", "servers", strings.Join(servers, ","), "znode", p, "session", fmt.Sprintf("%#x", conn.SessionID()))
	return nil
}

// awaitSession waits for the first StateHasSession event.
func awaitSession(ctx context.Context, events <-chan zk.Event) error {
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("smoke: zookeeper session: %w", ctx.Err())
		case ev, ok := <-events:
			if !ok {
				return errors.New("smoke: zookeeper connection closed before a session was established")
			}
			if ev.State == zk.StateHasSession {
				return nil
			}
		}
	}
}

func ensurePath(conn *zk.Conn, p string) error {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	cur := ""
	for _, part := range parts {
		cur += "/" + part
		_, err := conn.Create(cur, nil, 0, zk.WorldACL(zk.PermAll))
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("smoke: zookeeper create %s: %w", cur, err)
		}
	}
	return nil
}

type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) { l.log.Debug(fmt.Sprintf(format, args...)) }

// Postgres runs a query on url and commits a prepared transaction (PREPARE TRANSACTION, then
// COMMIT PREPARED from a second connection), checking that the row it wrote is there afterwards.
// The server must allow prepared transactions (max_prepared_transactions > 0).
func Postgres(ctx context.Context, url string, log *slog.Logger) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("smoke: postgres connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version string
	if err := conn.QueryRow(ctx, "select current_setting('server_version')").Scan(&version); err != nil {
		return fmt.Errorf("smoke: postgres query: %w", err)
	}
	table := "txkit_smoke_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := conn.Exec(ctx, "create table "+table+" (id text primary key)"); err != nil {
		return fmt.Errorf("smoke: postgres create table: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "drop table if exists "+table) //nolint:errcheck // best-effort cleanup
	gid := "txkit-smoke-" + uuid.NewString()
	if _, err := conn.Exec(ctx, "begin"); err != nil {
		return fmt.Errorf("smoke: postgres begin: %w", err)
	}
	if _, err := conn.Exec(ctx, "insert into "+table+" values ($1)", gid); err != nil {
		return fmt.Errorf("smoke: postgres insert: %w", err)
	}
	if _, err := conn.Exec(ctx, "prepare transaction '"+gid+"'"); err != nil {
		return fmt.Errorf("smoke: postgres prepare transaction %s: %w", gid, err)
	}
	// A second connection finishes it: a prepared transaction belongs to no session.
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		conn.Exec(context.WithoutCancel(ctx), "rollback prepared '"+gid+"'") //nolint:errcheck // best-effort cleanup
		return fmt.Errorf("smoke: postgres second connect: %w", err)
	}
	defer other.Close(context.WithoutCancel(ctx))
	var prepared int
	if err := other.QueryRow(ctx, "select count(*) from pg_prepared_xacts where gid = $1", gid).Scan(&prepared); err != nil {
		return fmt.Errorf("smoke: postgres pg_prepared_xacts: %w", err)
	}
	if prepared != 1 {
		return fmt.Errorf("%w: %d prepared transactions named %s, want 1", ErrMismatch, prepared, gid)
	}
	if _, err := other.Exec(ctx, "commit prepared '"+gid+"'"); err != nil {
		return fmt.Errorf("smoke: postgres commit prepared %s: %w", gid, err)
	}
	var n int
	if err := conn.QueryRow(ctx, "select count(*) from "+table+" where id = $1", gid).Scan(&n); err != nil {
		return fmt.Errorf("smoke: postgres read back: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("%w: %d rows after COMMIT PREPARED, want 1", ErrMismatch, n)
	}
	log.Info("postgres ok", "version", version, "prepared_gid", gid)
	return nil
}

// RocketMQ sends one message to topic (which must exist) with a synchronous producer and waits until
// a push consumer in a fresh consumer group receives it. It blocks until then or ctx ends.
func RocketMQ(ctx context.Context, namesrv []string, topic string, log *slog.Logger) error {
	id := uuid.NewString()
	instance := fmt.Sprintf("txkit-smoke-%d-%s", os.Getpid(), id[:8])
	resolver := primitive.NewPassthroughResolver(namesrv)

	received := make(chan string, 1)
	var seen atomic.Int64
	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName("txkit-smoke-"+id[:8]),
		consumer.WithInstance(instance+"-c"),
		consumer.WithNsResolver(resolver),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromLastOffset),
	)
	if err != nil {
		return fmt.Errorf("smoke: rocketmq consumer: %w", err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			seen.Add(1)
			if m.GetKeys() == id {
				select {
				case received <- string(m.Body):
				default:
				}
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return fmt.Errorf("smoke: rocketmq subscribe %s: %w", topic, err)
	}
	if err := c.Start(); err != nil {
		return fmt.Errorf("smoke: rocketmq consumer start on %s: %w", topic, err)
	}
	defer c.Shutdown() //nolint:errcheck // nothing to do about a failed shutdown here

	p, err := rocketmq.NewProducer(
		producer.WithGroupName("txkit-smoke-producer"),
		producer.WithInstanceName(instance+"-p"),
		producer.WithNsResolver(resolver),
		producer.WithRetry(2),
	)
	if err != nil {
		return fmt.Errorf("smoke: rocketmq producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("smoke: rocketmq producer start: %w", err)
	}
	defer p.Shutdown() //nolint:errcheck // nothing to do about a failed shutdown here

	body := "hello from txkit " + id
	start := time.Now()
	// A consumer in a new group starts at the queue's end once it has been assigned its queues;
	// keep sending (same key) until one copy arrives, so a message sent before the rebalance is not missed.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		msg := primitive.NewMessage(topic, []byte(body))
		msg.WithKeys([]string{id})
		res, err := p.SendSync(ctx, msg)
		if err != nil {
			return fmt.Errorf("smoke: rocketmq send to %s: %w", topic, err)
		}
		if res.Status != primitive.SendOK {
			return fmt.Errorf("smoke: rocketmq send to %s: status %d", topic, res.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("smoke: rocketmq waiting for the message on %s: %w", topic, ctx.Err())
		case got := <-received:
			if got != body {
				return fmt.Errorf("%w: received %q, want %q", ErrMismatch, got, body)
			}
			log.Info("rocketmq ok", "namesrv", strings.Join(namesrv, ","), "topic", topic, "msg_id", res.MsgID,
				"round_trip", time.Since(start).Round(time.Millisecond))
			return nil
		case <-tick.C:
		}
	}
}
