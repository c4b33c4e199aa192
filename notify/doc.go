// Package notify is best-effort notification: telling another system the result of something
// that already happened (a recharge succeeded, a payment settled), the way payment platforms
// call their merchants back.
//
// The sender records a notification in its own transaction, next to the result it reports
// ([Notifier.Enqueue]), so a notification exists if and only if the result was committed. The
// elected leader ([Notifier.Run], under a lock.Elector) delivers it by HTTP POST — a JSON
// [Delivery], signed with HMAC-SHA256 over the timestamp, method, target and body, with the
// notification id, receiver, timestamp and signature in headers — and retries on a schedule
// ([DefaultSchedule]: 15s, 15s, 30s, 3m, 10m, 20m, 30m, 30m, 30m, 1h, 3h, 3h, 3h, 6h, 6h, with
// jitter, every due time computed by PostgreSQL) until the receiver answers 2xx (with the echo
// body it must send back, if one is set). After the last attempt the notification is failed:
// listed for operators ([Notifier.ListFailed]) and redeliverable ([Notifier.Redeliver]). Every
// attempt's status code, latency and error are kept ([Notifier.Attempts]). Each receiver has its
// own bound on deliveries in flight, so a slow one never delays the others, and a circuit breaker
// holds back a receiver that keeps failing instead of hammering it.
//
// Delivery is at least once. The receiving side, package notify/inbox, verifies signature and timestamp,
// checks that the delivery names it, refuses a replayed request, and applies each notification
// once, claiming its id in an idempotency.Store in the same transaction as the effect. A lost
// notification is never a lost fact: the receiver asks the sender ([Notifier.QueryHandler],
// [Client]) and the inbox's Reconcile applies what it never got. The query handler signs its answers
// too, and the Client believes only those, so nobody between the two (nor a fake sender) can make
// a receiver apply a result.
//
// What is checked, and the limits:
//   - Secrets are at least 16 bytes (random ones, from a secret store); receivers and the query
//     API are https:// only, unless [WithPlainHTTP] (and [Client].PlainHTTP) allows plain HTTP
//     for tests, the loopback interface or a network that encrypts below HTTP.
//   - Neither the notifier's default HTTP client nor the Client's follows redirects: a signed
//     body goes to the configured URL only.
//   - A payload is at most [MaxPayloadLen] bytes, a key [MaxKeyLen], a receiver's name
//     [MaxReceiverLen]: Enqueue refuses more with [ErrTooLarge], and the Inbox reads a delivery of
//     that size whole (a longer body is answered 413).
//   - No answer of the Inbox or the query handler carries an error's text: refusals say
//     "unauthorized", failures give a request id that names the logged error.
//
// The sender:
//
//	n, _ := notify.New(pool, []notify.Receiver{{Name: "shop", URL: "https://shop.example/notify",
//		Secrets: []string{secret}, Echo: "success"}}, notify.WithElector(el))
//	_ = n.Migrate(ctx)
//	go n.Run(ctx) // delivers on the leader only
//	mux.Handle("GET /notifications", n.QueryHandler())
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// ... record the recharge ...
//		_, err := n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: orderID, Payload: result})
//		return err
//	})
//
// Many leaders: with [WithPartitions] the receivers are split into P partitions by a hash of their
// names, each with its own election and fencing token, so that N notifier instances share the
// deliveries (each leads about P/N partitions; a dead instance's partitions move to the others
// within the ZooKeeper session timeout and a second). A receiver's notifications stay with one
// leader at a time, with its delivery slots and breaker; a notification posted by a leader that
// died before recording the result is posted again by the next, with the same id, and the inbox
// applies it once. [ContenderCount] (ZooKeeper) or [HeartbeatCount] (other lock backends) counts
// the instances. The number is stored with the tables at the first Run, and another is refused.
//
// Metrics: [WithRegisterer] registers the notifier's Prometheus metrics (due notifications,
// delivered, given up, attempts by result, delivery latency, and each receiver's circuit state
// for the first [WithMetricReceivers] receivers) on the caller's registry.
//
// Tracing: [Notifier.Enqueue] stores the trace context of its ctx with the notification (a
// trace_context column), and each delivery attempt, made later by whichever process leads, is a
// span "notify deliver" that is a CHILD of that stored context — so every attempt, across retries,
// leader changes and restarts, shows in the trace of the request that enqueued the notification,
// where one looks for it — rather than the root of a trace of its own (when the leader's ctx carries
// a span, the attempt is linked to it). The attempt's span is sent to the receiver in the W3C
// headers (traceparent, tracestate), so the receiver's work joins the same trace. Spans go to
// [WithTracerProvider]'s provider (default the global one). The notifier logs what happens to an
// attempt with the attempt's context (InfoContext and the like), so a logger whose handler adds
// trace and span ids gives them.
//
// The receiver:
//
//	in, _ := inbox.New(pool, store, "shop", []string{secret}, func(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
//		_, err := tx.Exec(ctx, `update orders set paid = true where id = $1`, d.Key)
//		return err
//	})
//	mux.Handle("POST /notify", in)
//	sender := notify.Client{URL: senderQueryURL, Receiver: "shop", Secrets: []string{secret}}
//	applied, err := in.Reconcile(ctx, sender, unpaidOrders...)
package notify
