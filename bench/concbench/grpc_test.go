package concbench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/examples/tcc-order/shoppb"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/participant/grpcbarrier"
	"github.com/txkit/txkit/participant/grpccall"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
)

// stockMethods are the gRPC methods of each op: the tcc-order example's shop.v1.Stock service,
// whose generated code the benchmark's participants serve.
var stockMethods = grpccall.Methods{
	participant.OpTry: shoppb.Stock_Try_FullMethodName, participant.OpConfirm: shoppb.Stock_Confirm_FullMethodName,
	participant.OpCancel: shoppb.Stock_Cancel_FullMethodName, participant.OpAction: shoppb.Stock_Action_FullMethodName,
	participant.OpCompensate: shoppb.Stock_Compensate_FullMethodName,
}

// grpcParticipants starts 3 gRPC participants over pool (barrier table in s), each a
// shop.v1.Stock server behind grpcbarrier's interceptor whose methods update the branch's counter
// row with sql, and returns them as signing grpccall participants, each on a connection of its
// own, and the payload of branch i of client cl (a StockRequest naming its counter row).
func grpcParticipants(b *testing.B, s *testenv.Schema, pool *pgxpool.Pool, sql map[participant.Op]string) ([]*grpccall.Participant, func(i, cl int) json.RawMessage) {
	b.Helper()
	mustExec(b, pool, counterDDL)
	bar, err := barrier.New(pool, barrier.WithLogger(testenv.Logger(b)), barrier.WithSecrets(secret))
	if err != nil {
		b.Fatal(err)
	}
	if err := bar.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	guard, err := grpcbarrier.UnaryServerInterceptor(bar, "/shop.v1.Stock/")
	if err != nil {
		b.Fatal(err)
	}
	parts := make([]*grpccall.Participant, 3)
	for i := range parts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(guard))
		shoppb.RegisterStockServer(srv, benchStock{sql: sql})
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		b.Cleanup(func() { srv.Stop(); <-served })
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cc.Close() })
		if parts[i], err = grpccall.New(cc, stockMethods, grpccall.WithSecret(secret)); err != nil {
			b.Fatal(err)
		}
	}
	payloads := make([][]json.RawMessage, len(parts))
	for i := range payloads {
		payloads[i] = make([]json.RawMessage, maxClients)
		for cl := range maxClients {
			if payloads[i][cl], err = grpccall.Payload(&shoppb.StockRequest{Sku: branch(i, cl), Qty: 1}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return parts, func(i, cl int) json.RawMessage { return payloads[i][cl] }
}

// benchStock serves shop.v1.Stock: each op runs its statement on the branch's counter row in the
// transaction of grpcbarrier's interceptor, as the HTTP recipes' participants do.
type benchStock struct {
	shoppb.UnimplementedStockServer
	sql map[participant.Op]string
}

func (s benchStock) do(ctx context.Context) (*shoppb.Done, error) {
	req, _ := grpcbarrier.Request(ctx)
	if _, err := grpcbarrier.Tx(ctx).Exec(ctx, s.sql[req.Op], req.Branch); err != nil {
		return nil, err
	}
	return &shoppb.Done{}, nil
}

func (s benchStock) Try(ctx context.Context, _ *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx)
}

func (s benchStock) Confirm(ctx context.Context, _ *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx)
}

func (s benchStock) Cancel(ctx context.Context, _ *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx)
}

func (s benchStock) Action(ctx context.Context, _ *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx)
}

func (s benchStock) Compensate(ctx context.Context, _ *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx)
}

// tcc-grpc: the tcc recipe with its 3 participants served over gRPC (grpcbarrier) and called
// through grpccall, against the same six calls made through grpccall one after the other.
func tccGRPCRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	return grpcRecipe(b, e, tcc.New, tccSQL, tccSides, tccFloor, tccScript())
}

// saga-grpc: the saga recipe over gRPC participants, against the same three action calls made
// through grpccall.
func sagaGRPCRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	return grpcRecipe(b, e, saga.New, sagaSQL, sagaSides, sagaFloor, sagaScript())
}

// grpcRecipe builds a coordinator recipe over gRPC participants: the participants of
// grpcParticipants running sql, a coordinator of newFn with each registered (names p0, p1, ...),
// and the recipe's sides, which take the registered handles for the coordinator's branches and
// the grpccall participants themselves for the bare calls (and the floor's).
func grpcRecipe[C coordinator.Base](b *testing.B, e *env, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error),
	sql map[participant.Op]string, sides func(C, []participant.Participant, []participant.Participant, func(i, cl int) json.RawMessage) (concbench.Op, concbench.Op),
	floor func(*floorLog, []participant.Participant, func(i, cl int) json.RawMessage) concbench.Op,
	script string) (concbench.Op, concbench.Op, string, bool) {
	s, pool := e.schema(b)
	parts, payload := grpcParticipants(b, s, pool, sql)
	c := coordinatorOn(b, newFn, e.pool(b, s), s.Name)
	var ps, handles []participant.Participant
	for i, p := range parts {
		h, err := c.Register(fmt.Sprint("p", i), p)
		if err != nil {
			b.Fatal(err)
		}
		ps, handles = append(ps, p), append(handles, h)
	}
	txkit, bare := sides(c, handles, ps, payload)
	e.floor = floor(e.floorLog(b, s), ps, payload)
	return txkit, bare, script, false
}
