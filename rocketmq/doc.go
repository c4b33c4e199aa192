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
//     the same queue for the same [message.Message].Key, the message ID as RocketMQ key, its
//     Tags as RocketMQ tag.
//   - [Consumer] applies a topic's messages to PostgreSQL: each in a transaction that first claims
//     the message ID in an [idempotency.Store], so redeliveries and republished duplicates are
//     acknowledged without effect. Failures are redelivered, then dead-lettered to %DLQ%<group>;
//     undecodable messages are logged and acknowledged so they never block a queue.
//     [WithTagExpression] has the broker deliver only the messages of some tags.
//   - [TxProducer] sends RocketMQ transactional (half) messages tied to a local PostgreSQL
//     transaction, the alternative to an outbox table: the broker delivers the message if and only
//     if the local transaction committed, asking back when the second phase is lost.
//
// Every Publisher, Consumer and TxProducer runs its own client with a unique instance name, which
// sidesteps v2.1.2's process-wide client cache: clients that share an instance name share one
// client, whose check-back handler is the first creator's, so a transactional producer created
// after a consumer or a plain producer would lose its check-backs.
//
// Each constructor has its own option type ([PublisherOption], [ConsumerOption],
// [TxProducerOption]); an option that fits several, such as [WithLogger] or [WithCredentials],
// is of each type it fits, so an option given to a constructor it does not fit does not compile.
//
// Metrics: [WithRegisterer] registers Prometheus metrics on the caller's registry: a [Consumer]'s
// txkit_rocketmq_consumed_total{result="handled"|"duplicate"|"retry"|"poison"} and
// txkit_rocketmq_handler_seconds, a [TxProducer]'s
// txkit_rocketmq_checkbacks_total{result="commit"|"rollback"|"unknown"}. The outbox relay counts
// what it publishes through a [Publisher].
//
// The message type is [message.Message] (outbox.Message is the same type): it lives in package
// message because the outbox, transactional messages and consumers all use it.
//
// A message's identity is its txkit id, [message.Message].ID: the message's RocketMQ keys (KEYS)
// and its [PropertyID] property (txkit_id) carry it, and the [Consumer] claims it. It is not the
// broker's message id (msgId, the client's UNIQ_KEY): a message published again — by the outbox
// relay after a failover or a failed acknowledgement, or by a send retry — is the same message
// with the same txkit id but a new msgId. A consumer written against another client (Java, C++,
// Python) must de-duplicate by KEYS or the txkit_id property, never by msgId, or it applies such
// a message twice.
//
// Topics: a Publisher's first send to a missing topic creates it only on a broker with
// autoCreateTopicEnable=true (the local test broker has it; production brokers usually do not),
// and a Consumer cannot start on a missing topic at all (the client creates none for consumers).
// Create topics ahead with [EnsureTopic] — which also creates the consumer groups' retry topics
// %RETRY%<group>, so that a new consumer neither logs "topic not exist" warnings nor waits up to
// 30 s to redeliver — or with mqadmin (deploy/local/rocketmq topic NAME). A Publisher's (and a
// TxProducer's) first send to each topic goes alone, and sends to that topic made meanwhile wait
// for it: rocketmq-client-go v2.1.2 fails concurrent first sends of a topic with "route info not
// found" (a relay publishing several keys at once met it on a new topic).
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
// [SetClientLogger] or [NewPanicHandler] — and the pull loop not even then. So a rogue or
// impersonated name server or broker can exhaust the memory of, or crash, every process using this package. Keep them on a
// private network, with ACL ([WithCredentials]) so that clients are authenticated; v2.1.2 has no
// TLS, so where the path is not trusted, carry it over an encrypted network (a VPN or a TLS
// tunnel). ACL does not authenticate the servers to the client.
// [WithMaxMessageSize] bounds what a [Consumer] decodes and hands to its handler, not what the
// client has read and inflated before.
//
// The client logs through a process-wide logger of its own (logrus at info, to stdout), and its
// panic hook is process-wide too: unset, a panic in a client goroutine ends the process. This
// package never changes either on its own; a program's main sets both in one call,
//
//	rocketmq.SetClientLogger(log.With("component", "rocketmq-client"), slog.LevelWarn)
//
// so that it need not import the client's rlog package ([NewRlogAdapter] and [NewPanicHandler]
// set one of them alone), or quiets the client with ROCKETMQ_GO_LOG_LEVEL=warn. Left to logrus,
// the client logs whole messages, bodies and properties included (the pulled batch each time a
// handler fails), and repeats a line for every failure; the adapter SetClientLogger installs
// logs messages as their count and ids and a repeated line once per 5 s ([NewRlogAdapter]).
//
// Publish in the relay, consume in another service:
//
//	err := rocketmq.EnsureTopic(ctx, nameservers, brokerAddr, "user-registered",
//		rocketmq.WithRetryTopicsFor("points-award"))
//	if err != nil { return err }
//	pub, err := rocketmq.NewPublisher(ctx, nameservers)
//	if err != nil { return err }
//	defer pub.Close()
//	relay, err := outbox.NewRelay(ob, pub, outbox.WithElector(elector))
//
//	store, err := idempotency.New(pool)
//	if err != nil { return err }
//	if err := store.Migrate(ctx); err != nil { return err }
//	c, err := rocketmq.NewConsumer(nameservers, "points-award", "user-registered", pool, store,
//		func(ctx context.Context, tx pgx.Tx, msg message.Message) error {
//			_, err := tx.Exec(ctx, `update accounts set points = points + 100 where id = $1`, msg.Key)
//			return err // nil commits the claim and the update together; an error redelivers
//		}, rocketmq.WithOrderly(time.Second))
//	if err != nil { return err }
//	g.Go(func() error { return c.Run(ctx) }) // until ctx ends; waits for handlers in flight
//
// A transactional message instead of an outbox row:
//
//	tp, err := rocketmq.NewTxProducer(ctx, nameservers, "user-registration-tx", pool)
//	if err != nil { return err }
//	defer tp.Close()
//	if err := tp.Migrate(ctx); err != nil { return err }
//	err = tp.Send(ctx, message.Message{ID: uuid.New(), Topic: "user-registered", Key: userID, Body: body},
//		func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, `insert into users (id, name) values ($1, $2)`, userID, name)
//			return err // nil: the message is delivered; an error: it is not, and Send returns it
//		})
//
// # Tracing
//
// With [WithTracerProvider] (default: the application's global provider), one trace runs from the
// request that sends a message to the transaction that applies it:
//
//   - A [Publisher] sends the W3C trace context of the ctx it is given in the message properties
//     [PropertyTraceParent] and [PropertyTraceState] (the outbox relay gives the context stored
//     with the message's row, under its "outbox relay publish" span, so the trace is that of the
//     request that enqueued it). It starts no span of its own.
//   - [TxProducer.Send] runs under a span "rocketmq send" (kind producer), the child of ctx's span,
//     and sends that span's context in the same two properties of the half message; the local
//     transaction runs under its child "rocketmq local transaction", which localTx's ctx carries.
//   - A check-back runs under a span "rocketmq check-back", the child of the trace context the
//     half message carries, not of anything in the answering process: the broker asks later, and
//     may ask another producer of the group because the sender died, and the question belongs to
//     the request that sent the message, so its span joins that request's trace, as the outbox
//     relay's publish span and the coordinators' recovery spans do (the client's callback has no
//     context of the answering process to link to). Its attribute txkit.checkback.result is the
//     answer.
//   - A [Consumer] runs each message under a span "rocketmq consume" (kind consumer), the child of
//     the properties' context — the relay's publish span or the send span — which the [Handler]'s
//     ctx carries. A message acknowledged without being applied (poison) has the span too, with
//     status Error.
//
// Errors are recorded on the spans (status Error). The package logs with the slog *Context
// methods under the span it is in (a client callback without a ctx, under the trace context of
// the message it is about), so a handler that reads the span from the record's ctx (such as
// package tracelog's) adds trace_id and span_id to every line.
package rocketmq
