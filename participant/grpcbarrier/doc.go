// Package grpcbarrier serves a participant's gRPC methods through a participant/barrier.Barrier:
// a unary server interceptor that does for a gRPC call what the barrier's HTTP handler does for
// a request. Package participant/grpccall makes the calls.
//
//	bar, _ := barrier.New(pool, barrier.WithSecrets(secret))
//	_ = bar.Migrate(ctx)
//	guard, _ := grpcbarrier.UnaryServerInterceptor(bar, "/shop.Inventory/")
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(guard))
//	shop.RegisterInventoryServer(srv, inventory{})
//
//	func (inventory) Reserve(ctx context.Context, r *shop.ReserveRequest) (*shop.Reply, error) {
//		tx := grpcbarrier.Tx(ctx) // the op's own transaction: write the business change in it
//		if _, err := tx.Exec(ctx, `update stock set reserved = reserved + $2 where sku = $1 and qty - reserved >= $2`, r.Sku, r.Qty); ...
//		return nil, status.Error(codes.FailedPrecondition, "insufficient stock") // a refusal: rolled back, the transaction aborts
//	}
//
// For every guarded call the interceptor verifies the signature in the call's metadata (the
// barrier's secrets and opt-out, barrier.WithSecrets and WithUnsignedRequests, and the
// timestamp window barrier.DefaultSignatureWindow), reads the gid, branch and op, and runs the method through the barrier in
// a transaction of its own, in which it first claims the signature as a nonce (a replay is
// refused): each op of a branch runs at most once, an empty rollback is answered OK without
// calling the method, a hanging try is refused (Aborted) without calling it. The method finds the
// transaction with [Tx] and the gid, branch and op with [Request]; the transaction is committed
// when it returns no error and rolled back otherwise — a panic included, which is recovered,
// logged with its stack and answered Internal with only a request id. The call's ctx carries the
// server span "participant <op>", continuing the W3C trace context of the metadata, and the
// caller's deadline: when the call is cancelled the transaction is rolled back and nothing is
// left behind.
//
// Answers (docs/participants.md has the table, the same for HTTP): OK; Unauthenticated for a
// signature missing, wrong, stale or replayed (nothing ran); InvalidArgument for missing or bad
// txkit metadata or an error wrapping participant.ErrBadRequest; Aborted for an error wrapping
// participant.ErrRefused and for a hanging try; the method's own status otherwise (Aborted or
// FailedPrecondition is the refusal the coordinator rolls back for, Unavailable and the like are
// retried); Internal with a request id for any other error.
package grpcbarrier
