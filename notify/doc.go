// Package notify is best-effort notification: telling another system the result of something
// that already happened (a recharge succeeded, a payment settled), the way payment platforms
// call their merchants back.
//
// The sender records a notification in its own transaction, next to the result it reports
// ([Notifier.Enqueue]), and once that commits makes the first attempt at once: a signed JSON
// [Delivery] POSTed from its own process — by [Notifier.Do], which runs the transaction and posts
// what it enqueued, or by [Notifier.Deliver] after a transaction of the caller's. The elected
// leader ([Notifier.Run], under a lock.Elector) makes the attempts that one did not (a failure, a
// process that died first) and retries on a schedule ([DefaultSchedule]) until the receiver
// answers 2xx; then it is failed, listed ([Notifier.ListFailed]) and redeliverable
// ([Notifier.Redeliver]). A notification's first attempt is claimed before it is posted (in Do's
// transaction itself), so two processes never both post it; a process's concurrent calls share
// their records' statements.
// Delivery is at least once: the receiving side, package notify/inbox, verifies the signature, refuses replays
// and applies each notification once, and its Reconcile asks the sender's query API
// ([Notifier.QueryHandler], [Client]) for what it never got.
//
//	n, _ := notify.New(pool, []notify.Receiver{{Name: "shop", URL: "https://shop.example/notify",
//		Secrets: []string{secret}, Echo: "success"}}, notify.WithElector(el))
//	_ = n.Migrate(ctx)
//	go n.Run(ctx) // delivers on the leader only
//	mux.Handle("GET /notifications", n.QueryHandler())
//	err := n.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
//		// ... record the recharge ...
//		_, err := n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: orderID, Payload: result})
//		return err
//	}) // committed, then posted; on failure the leader retries on schedule
//
//	// The receiver:
//	in, _ := inbox.New(pool, store, "shop", []string{secret}, apply)
//	mux.Handle("POST /notify", in)
//
// Per-receiver queues and circuit breakers, partitioned delivery over many leaders
// ([WithPartitions]), limits and what is checked, metrics and tracing: docs/notify.md,
// docs/security.md, docs/metrics.md, docs/tracing.md.
package notify
