package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/txkit/txkit/examples/tcc-order/shoppb"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/participant/grpcbarrier"
)

// grpcServer returns the gRPC server of the participant c: c.Resource's ops as the methods of its
// shoppb service (Stock or Account), each guarded by bar's interceptor — signature checked, the
// op run at most once in its own transaction, empty rollbacks answered OK, hanging tries and
// actions refused — behind c.Faults. With c.NoBarrier the methods run unguarded (and unsigned).
func grpcServer(c ParticipantConfig, bar *barrier.Barrier) (*grpc.Server, error) {
	m := methods{r: c.Resource}
	service := "/shop.v1." + map[string]string{"stock": "Stock", "account": "Account"}[c.Resource.Name] + "/"
	chain := []grpc.UnaryServerInterceptor{c.Faults.Interceptor}
	if c.NoBarrier {
		m.unguarded, m.log = c.Pool, c.Log
	} else {
		guard, err := grpcbarrier.UnaryServerInterceptor(bar, service)
		if err != nil {
			return nil, err
		}
		chain = append(chain, guard)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(chain...))
	switch c.Resource.Name {
	case "stock":
		shoppb.RegisterStockServer(srv, stockServer{methods: m})
	case "account":
		shoppb.RegisterAccountServer(srv, accountServer{methods: m})
	default:
		return nil, fmt.Errorf("no gRPC service for %s", c.Resource.Name)
	}
	return srv, nil
}

// methods runs an op of a shoppb method: Resource.Move in the transaction the barrier's
// interceptor began for the call (grpcbarrier.Tx), for the gid and branch of its metadata
// (grpcbarrier.Request). An error wrapping participant.ErrRefused is answered ABORTED by the
// interceptor, and the transaction rolled back.
type methods struct {
	r Resource
	// unguarded, when set, runs each op in a transaction of its own on this pool, without the
	// barrier: only for -no-barrier.
	unguarded *pgxpool.Pool
	log       *slog.Logger
}

func (m methods) do(ctx context.Context, op participant.Op, key string, n int64) (*shoppb.Done, error) {
	if m.unguarded != nil {
		return m.doUnguarded(ctx, op, key, n)
	}
	req, ok := grpcbarrier.Request(ctx)
	if !ok {
		return nil, fmt.Errorf("%s: %s called without the barrier's interceptor", m.r.Name, op)
	}
	if req.Op != op { // the coordinator calls each op's own method (order/grpc.go)
		return nil, fmt.Errorf("%s: op %s sent to the method of %s: %w", m.r.Name, req.Op, op, participant.ErrBadRequest)
	}
	if err := m.r.Move(ctx, grpcbarrier.Tx(ctx), req.GID, req.Branch, op, key, n); err != nil {
		return nil, err
	}
	return &shoppb.Done{}, nil
}

// doUnguarded is do without the barrier (nor signatures), reading the gid and branch from the
// call's txkit metadata itself: every call runs the op.
func (m methods) doUnguarded(ctx context.Context, op participant.Op, key string, n int64) (*shoppb.Done, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	err := pgx.BeginFunc(ctx, m.unguarded, func(tx pgx.Tx) error {
		return m.r.Move(ctx, tx, first("txkit-gid"), first("txkit-branch"), op, key, n)
	})
	switch {
	case err == nil:
		return &shoppb.Done{}, nil
	case errors.Is(err, participant.ErrRefused):
		return nil, status.Error(codes.Aborted, err.Error())
	}
	m.log.WarnContext(ctx, "op failed", "op", op.String(), "err", err)
	return nil, status.Error(codes.Internal, "op failed")
}

// stockServer serves shop.v1.Stock.
type stockServer struct {
	shoppb.UnimplementedStockServer
	methods
}

// Try reserves the stock (available → reserved); refused when too little is available.
func (s stockServer) Try(ctx context.Context, r *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpTry, r.GetSku(), r.GetQty())
}

// Confirm sells the reservation (reserved → sold).
func (s stockServer) Confirm(ctx context.Context, r *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpConfirm, r.GetSku(), r.GetQty())
}

// Cancel releases the reservation (reserved → available).
func (s stockServer) Cancel(ctx context.Context, r *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpCancel, r.GetSku(), r.GetQty())
}

// Action deducts the stock (available → sold); refused when too little is available.
func (s stockServer) Action(ctx context.Context, r *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpAction, r.GetSku(), r.GetQty())
}

// Compensate gives the stock back (sold → available).
func (s stockServer) Compensate(ctx context.Context, r *shoppb.StockRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpCompensate, r.GetSku(), r.GetQty())
}

// accountServer serves shop.v1.Account.
type accountServer struct {
	shoppb.UnimplementedAccountServer
	methods
}

// Try freezes the funds (balance → frozen); refused when the balance is too low.
func (s accountServer) Try(ctx context.Context, r *shoppb.AccountRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpTry, r.GetAccount(), r.GetAmount())
}

// Confirm spends them (frozen → spent).
func (s accountServer) Confirm(ctx context.Context, r *shoppb.AccountRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpConfirm, r.GetAccount(), r.GetAmount())
}

// Cancel unfreezes them (frozen → balance).
func (s accountServer) Cancel(ctx context.Context, r *shoppb.AccountRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpCancel, r.GetAccount(), r.GetAmount())
}

// Action debits the account (balance → spent); refused when the balance is too low.
func (s accountServer) Action(ctx context.Context, r *shoppb.AccountRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpAction, r.GetAccount(), r.GetAmount())
}

// Compensate refunds the debit (spent → balance).
func (s accountServer) Compensate(ctx context.Context, r *shoppb.AccountRequest) (*shoppb.Done, error) {
	return s.do(ctx, participant.OpCompensate, r.GetAccount(), r.GetAmount())
}
