// Package rocketmq is txkit's RocketMQ adapter (rocketmq-client-go v2.1.2, the Remoting protocol
// of RocketMQ 4.x and 5.x brokers): it carries messages over RocketMQ and applies them exactly
// once on the other side.
//
// It is a top-level package, not a part of outbox, because several patterns use it: the outbox
// relay publishes through its [Publisher], transactional messages are its [TxProducer] (an
// alternative to an outbox table), and notify/rocketmq feeds a notifier through its [Consumer].
// None of them owns it, and a program that uses only transactional messages or only consumes
// need not think of an outbox.
//
//   - [Publisher] is the [outbox.Publisher] the outbox relay sends through: synchronous sends,
//     the same queue for the same [outbox.Message].Key, the message ID as RocketMQ key.
//   - [Consumer] applies a topic's messages to PostgreSQL: each in a transaction that first claims
//     the message ID in an [idempotency.Store], so redeliveries and republished duplicates are
//     acknowledged without effect. Failures are redelivered, then dead-lettered to %DLQ%<group>;
//     undecodable messages are logged and acknowledged so they never block a queue.
//   - [TxProducer] sends RocketMQ transactional (half) messages tied to a local PostgreSQL
//     transaction, the alternative to an outbox table: the broker delivers the message if and only
//     if the local transaction committed, asking back when the second phase is lost.
//
// Every Publisher, Consumer and TxProducer runs its own client with a unique instance name, which
// sidesteps v2.1.2's process-wide client cache: clients that share an instance name share one
// client, whose check-back handler is the first creator's, so a transactional producer created
// after a consumer or a plain producer would lose its check-backs. Topics must exist before a Consumer runs (the client creates none for
// consumers); create them with the admin API or mqadmin.
//
// On a broker with ACL on (aclEnable=true), give every Publisher, Consumer and TxProducer the
// account's keys with [WithCredentials]: the client then signs each request (HMAC-SHA1 under the
// secret key) and the broker checks the signature and the account's rights on the topic and
// group. Without ACL, anyone who reaches the broker can publish to any topic and consume any
// group's messages. deploy/local/rocketmq runs such a broker beside the plain one for the tests.
//
// The name servers and brokers, and the network to them, must be trusted: rocketmq-client-go
// v2.1.2 does not bound what they send. It allocates whatever frame length a peer announces
// (up to 2 GiB per frame; a negative one panics), inflates a compressed message body with no
// limit, and decodes pulled messages trusting their length fields (a bad one panics). Most of its
// goroutines recover a panic only when primitive.PanicHandler is set — a program sets it with
// [NewPanicHandler] — and the pull loop not even then. So a rogue or impersonated name server or
// broker can exhaust the memory of, or crash, every process using this package. Keep them on a
// private network, with ACL ([WithCredentials]) so that clients are authenticated; v2.1.2 has no
// TLS, so where the path is not trusted, carry it over an encrypted network (a VPN or a TLS
// tunnel). ACL does not authenticate the servers to the client.
// [WithMaxMessageSize] bounds what a [Consumer] decodes and hands to its handler, not what the
// client has read and inflated before.
//
// The client logs through a process-wide logger of its own (logrus at info, to stdout). This
// package never replaces it; a program routes it to slog with [NewRlogAdapter] and rlog.SetLogger,
// or quiets it with ROCKETMQ_GO_LOG_LEVEL=warn. Its panic hook is process-wide too: a program
// sets it with primitive.PanicHandler = [NewPanicHandler](log), or a panic in a client goroutine
// ends the process.
//
// Publish in the relay, consume in another service:
//
//	pub, err := rocketmq.NewPublisher(ctx, []string{"127.0.0.1:9876"})
//	if err != nil { return err }
//	defer pub.Close()
//	relay, err := outbox.NewRelay(pool, pub, elector)
//
//	store, err := idempotency.New()
//	if err != nil { return err }
//	if err := store.Migrate(ctx, pool); err != nil { return err }
//	c, err := rocketmq.NewConsumer([]string{"127.0.0.1:9876"}, "points-award", "user-registered", pool, store,
//		func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
//			_, err := tx.Exec(ctx, `update accounts set points = points + 100 where id = $1`, msg.Key)
//			return err // nil commits the claim and the update together; an error redelivers
//		}, rocketmq.WithOrderly(true))
//	if err != nil { return err }
//	g.Go(func() error { return c.Run(ctx) }) // until ctx ends; waits for handlers in flight
//
// A transactional message instead of an outbox row:
//
//	tp, err := rocketmq.NewTxProducer(ctx, nameservers, "user-registration-tx", pool)
//	if err != nil { return err }
//	defer tp.Close()
//	if err := tp.Migrate(ctx, pool); err != nil { return err }
//	err = tp.Send(ctx, outbox.Message{ID: uuid.New(), Topic: "user-registered", Key: userID, Body: body},
//		func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, `insert into users (id, name) values ($1, $2)`, userID, name)
//			return err // nil: the message is delivered; an error: it is not, and Send returns it
//		})
package rocketmq
