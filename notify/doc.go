// Package notify is best-effort notification: telling another system the result of something
// that already happened (a recharge succeeded, a payment settled), the way payment platforms
// call their merchants back.
//
// The sender records a notification in its own transaction, next to the result it reports
// ([Notifier.Enqueue]). The elected leader ([Notifier.Run], under a lock.Elector) POSTs it as a
// signed JSON [Delivery] and retries on a schedule ([DefaultSchedule]) until the receiver answers
// 2xx; then it is failed, listed ([Notifier.ListFailed]) and redeliverable ([Notifier.Redeliver]).
// Delivery is at least once: the receiving side, package notify/inbox, verifies the signature, refuses replays
// and applies each notification once, and its Reconcile asks the sender's query API
// ([Notifier.QueryHandler], [Client]) for what it never got.
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
//	// The receiver:
//	in, _ := inbox.New(pool, store, "shop", []string{secret}, apply)
//	mux.Handle("POST /notify", in)
//
// Per-receiver queues and circuit breakers, partitioned delivery over many leaders
// ([WithPartitions]), limits and what is checked, metrics and tracing: docs/notify.md,
// docs/security.md, docs/metrics.md, docs/tracing.md.
package notify
