package grpccall_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/participant/grpcbarrier"
	"github.com/txkit/txkit/participant/grpccall"
	"github.com/txkit/txkit/tcc"
)

// A TCC transaction whose branch is a stock service's gRPC methods: Reserve (try), Confirm and
// Release (cancel), guarded by the barrier's interceptor. The service here is registered by hand
// with well-known message types; yours uses its generated code.
func Example() {
	ctx := context.Background()
	pool, drop := testenv.ExamplePool(ctx)
	defer drop()
	secret := rand.Text() // shared by the coordinators and the participant: from your secret store
	if _, err := pool.Exec(ctx, `create table stock (item text primary key, available int not null, reserved int not null);
		insert into stock values ('apple', 10, 0)`); err != nil {
		panic(err)
	}

	// The participant: each op once, in grpcbarrier.Tx(ctx); FailedPrecondition refuses.
	bar, err := barrier.New(pool, barrier.WithSecrets(secret))
	if err != nil {
		panic(err)
	}
	if err := bar.Migrate(ctx); err != nil {
		panic(err)
	}
	guard, err := grpcbarrier.UnaryServerInterceptor(bar, "/shop.Stock/")
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(guard))
	srv.RegisterService(stockService(func(ctx context.Context, qty *wrapperspb.Int32Value) error {
		req, _ := grpcbarrier.Request(ctx)
		sql := map[participant.Op]string{
			participant.OpTry:     `update stock set available = available - $1, reserved = reserved + $1 where item = 'apple' and available >= $1`,
			participant.OpConfirm: `update stock set reserved = reserved - $1 where item = 'apple'`,
			participant.OpCancel:  `update stock set available = available + $1, reserved = reserved - $1 where item = 'apple'`,
		}[req.Op]
		tag, err := grpcbarrier.Tx(ctx).Exec(ctx, sql, qty.GetValue())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return status.Error(codes.FailedPrecondition, "not enough apples")
		}
		return nil
	}), struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// The coordinator: the gRPC participant is registered by name, as every process that may
	// recover the transaction does.
	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	tccs, err := tcc.New(pool)
	if err != nil {
		panic(err)
	}
	if err := tccs.Migrate(ctx); err != nil {
		panic(err)
	}
	inv, err := grpccall.New(cc, grpccall.Methods{
		participant.OpTry:     "/shop.Stock/Reserve",
		participant.OpConfirm: "/shop.Stock/Confirm",
		participant.OpCancel:  "/shop.Stock/Release",
	}, grpccall.WithSecret(secret))
	if err != nil {
		panic(err)
	}
	stock, err := tccs.Register("stock", inv)
	if err != nil {
		panic(err)
	}
	order := func(qty int32) {
		g, err := tccs.Begin(ctx)
		if err != nil {
			panic(err)
		}
		payload, err := grpccall.Payload(wrapperspb.Int32(qty))
		if err != nil {
			panic(err)
		}
		if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: stock, Payload: payload}); errors.Is(err, participant.ErrRefused) {
			fmt.Printf("order of %d: refused, %q, rollback: %v\n", qty, err.Error()[strings.LastIndex(err.Error(), ": ")+2:], g.Rollback(ctx))
			return
		} else if err != nil {
			panic(err)
		}
		fmt.Printf("order of %d: commit: %v\n", qty, g.Commit(ctx))
	}
	order(3)
	order(20)
	var available, reserved int
	if err := pool.QueryRow(ctx, `select available, reserved from stock`).Scan(&available, &reserved); err != nil {
		panic(err)
	}
	fmt.Printf("apple: %d available, %d reserved\n", available, reserved)
	// Output:
	// order of 3: commit: <nil>
	// order of 20: refused, "not enough apples", rollback: <nil>
	// apple: 7 available, 0 reserved
}

// stockService is what generated code registers: three methods taking an Int32Value, each
// through the server's interceptor, all served by fn.
func stockService(fn func(ctx context.Context, qty *wrapperspb.Int32Value) error) *grpc.ServiceDesc {
	desc := &grpc.ServiceDesc{ServiceName: "shop.Stock", HandlerType: (*any)(nil)}
	for _, name := range []string{"Reserve", "Confirm", "Release"} {
		full := "/shop.Stock/" + name
		desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.Int32Value)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, m any) (any, error) {
					return &emptypb.Empty{}, fn(ctx, m.(*wrapperspb.Int32Value))
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: full}, h)
			}})
	}
	return desc
}
