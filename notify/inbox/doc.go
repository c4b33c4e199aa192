// Package inbox is the receiving side of package notify: an http.Handler that verifies the
// sender's deliveries and applies each notification once, in the receiver's own transaction, and
// [Inbox.Reconcile], which asks the sender for results it never got.
//
//	in, _ := inbox.New(pool, store, "shop", []string{secret}, func(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
//		_, err := tx.Exec(ctx, `update orders set paid = true where id = $1`, d.Key)
//		return err
//	})
//	mux.Handle("POST /notify", in)
//	sender := notify.Client{URL: senderQueryURL, Receiver: "shop", Secrets: []string{secret}}
//	applied, err := in.Reconcile(ctx, sender, unpaidOrders...)
package inbox
