// Package grpctest is the gRPC participant of this repository's tests of packages
// participant/grpccall and participant/grpcbarrier: a real gRPC server on loopback, guarded by a
// barrier's interceptor, whose methods (one per op, service txkit.test.Party) write a ledger row
// in the op's own transaction. Its messages are well-known types (wrapperspb.StringValue in,
// emptypb.Empty out): no generated code. The request's value steers a method: "refuse" answers
// FailedPrecondition for the first-phase ops, "panic" panics; [Server.SetHook] adds more.
package grpctest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

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
)

// Service is the test service's name.
const Service = "txkit.test.Party"

// Method returns the full name of the method serving op ("/txkit.test.Party/Try").
func Method(op participant.Op) string {
	name := op.String()
	return "/" + Service + "/" + strings.ToUpper(name[:1]) + name[1:]
}

// Methods returns the methods of ops, for grpccall.New.
func Methods(ops ...participant.Op) grpccall.Methods {
	m := grpccall.Methods{}
	for _, op := range ops {
		m[op] = Method(op)
	}
	return m
}

// The ops of each protocol.
var (
	TCC   = []participant.Op{participant.OpTry, participant.OpConfirm, participant.OpCancel}
	Saga  = []participant.Op{participant.OpAction, participant.OpCompensate}
	TwoPC = []participant.Op{participant.OpPrepare, participant.OpCommit, participant.OpAbort}
	// ThreePC's participant ops.
	ThreePC = []participant.Op{participant.OpCanCommit, participant.OpPreCommit, participant.OpDoCommit, participant.OpAbort}
)

// Hook runs at the start of a method, in the op's transaction, before the ledger row: an error
// it returns is the method's answer.
type Hook func(ctx context.Context, req participant.Request, value string) error

// Server is a running test server.
type Server struct {
	Addr string
	Conn *grpc.ClientConn // a client connection to Addr
	s    *testenv.Schema
	mu   sync.Mutex
	hook Hook
}

// Start serves the test service on a loopback port with bar's interceptor (guarding the
// service's methods) and the ledger in s's schema, until the test ends.
func Start(t testing.TB, s *testenv.Schema, bar *barrier.Barrier, opts ...grpc.ServerOption) *Server {
	t.Helper()
	if _, err := s.Pool.Exec(t.Context(), `create table if not exists grpc_ledger (gid text, branch text, op text, value text)`); err != nil {
		t.Fatal(err)
	}
	guard, err := grpcbarrier.UnaryServerInterceptor(bar, "/"+Service+"/")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{s: s}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(guard)}, opts...)...)
	desc := grpc.ServiceDesc{ServiceName: Service, HandlerType: (*any)(nil)}
	for op := participant.OpTry; op <= participant.OpDoCommit; op++ {
		full := Method(op)
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: full[len(Service)+2:],
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, m any) (any, error) { return srv.handle(ctx, op, m.(*wrapperspb.StringValue)) }
				if ic == nil {
					return h(ctx, in)
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: full}, h)
			},
		})
	}
	gs.RegisterService(&desc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	srv.Addr = lis.Addr().String()
	srv.Conn = Dial(t, srv.Addr)
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return srv
}

// Dial returns a client connection to addr (plaintext), closed when the test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// SetHook sets the hook every method runs first (nil: none).
func (s *Server) SetHook(h Hook) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

// handle is every method: the hook, the value's verdict, then a ledger row in the op's
// transaction.
func (s *Server) handle(ctx context.Context, op participant.Op, in *wrapperspb.StringValue) (*emptypb.Empty, error) {
	tx := grpcbarrier.Tx(ctx)
	req, ok := grpcbarrier.Request(ctx)
	if tx == nil || !ok || req.Op != op {
		return nil, status.Errorf(codes.Internal, "method %s of op %s called with tx %v, request %+v", Method(op), op, tx, req)
	}
	s.mu.Lock()
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, req, in.GetValue()); err != nil {
			return nil, err
		}
	}
	switch in.GetValue() {
	case "refuse":
		if op == participant.OpTry || op == participant.OpAction || op == participant.OpPrepare || op == participant.OpCanCommit || op == participant.OpPreCommit {
			return nil, status.Error(codes.FailedPrecondition, "insufficient stock")
		}
	case "panic":
		panic("test panic with a secret: s3cr3t")
	}
	if _, err := tx.Exec(ctx, `insert into grpc_ledger (gid, branch, op, value) values ($1, $2, $3, $4)`,
		req.GID, req.Branch, op.String(), in.GetValue()); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return &emptypb.Empty{}, nil
}

// Ledger returns how many committed ledger rows gid's branch has for op ("" branch: any).
func (s *Server) Ledger(t testing.TB, gid, branch string, op participant.Op) int {
	t.Helper()
	var n int
	if err := s.s.Pool.QueryRow(context.Background(), `select count(*) from grpc_ledger where gid = $1 and ($2 = '' or branch = $2) and op = $3`,
		gid, branch, op.String()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
