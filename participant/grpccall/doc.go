// Package grpccall calls participants over gRPC: a branch of a TCC, saga, two-phase or
// three-phase commit transaction targets methods of the participant's own gRPC service (one full
// method name per op, such as "/shop.Inventory/Reserve" for the try), with the branch's request
// message stored serialized in its payload. txkit needs no generated code: the stored bytes are
// sent as they are (a raw-bytes codec named "proto"), and the participant's server decodes them
// with its own types.
//
//	cc, _ := grpc.NewClient("dns:///inventory.shop:9000", grpc.WithTransportCredentials(creds))
//	inv, _ := grpccall.New(cc, grpccall.Methods{
//		participant.OpTry:     "/shop.Inventory/Reserve",
//		participant.OpConfirm: "/shop.Inventory/Confirm",
//		participant.OpCancel:  "/shop.Inventory/Release",
//	}, grpccall.WithSecret(secret))
//	stock, _ := coord.Register("inventory", inv) // every coordinator that may recover registers it
//	payload, _ := grpccall.Payload(&shop.ReserveRequest{Sku: "apple", Qty: 2})
//	err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: stock, Payload: payload})
//
// A gRPC participant is registered with the coordinator by name, as an in-process one is: the
// branch stores the name (target kind "grpc"), and the recovery — maybe in another process —
// calls the participant registered under it. The connection is the user's
// [grpc.ClientConnInterface], with their dial options, credentials, balancer and resolver:
// service discovery is gRPC's own ("dns:///host:port", or a resolver registered with
// google.golang.org/grpc/resolver; docs/participants.md). Branch messages are small: a fixed
// window size (grpc.WithInitialWindowSize and WithInitialConnWindowSize, and the server's
// grpc.InitialWindowSize and InitialConnWindowSize) turns off gRPC's bandwidth-estimation pings,
// about one write and one read per call on each end (docs/benchmarks.md, "The table").
//
// Each call carries the gid, branch and op, a random nonce and the HMAC-SHA256 signature of
// the method, that metadata and the message in its metadata (txkit-*), the W3C trace context of
// ctx's span, and ctx's deadline — the coordinator's per-call timeout — as the gRPC deadline.
// The answer is mapped as the HTTP one is (docs/participants.md has the one table for both): OK
// is success, Aborted and FailedPrecondition a business refusal (an error wrapping
// [participant.ErrRefused]: the transaction is rolled back, the op not retried), any other code
// an error the coordinator retries with backoff. The server side is package
// participant/grpcbarrier.
package grpccall
