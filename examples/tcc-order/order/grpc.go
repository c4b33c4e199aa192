package main

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/txkit/txkit/examples/tcc-order/shoppb"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/grpccall"
)

// registrar is a coordinator (tcc, saga): it registers participants by name.
type registrar interface {
	Register(name string, p participant.Participant) (participant.Participant, error)
}

// dial connects to the stock and account services' gRPC targets (-stock, -account): any target
// gRPC resolves — "host:port", "dns:///stock.shop:9081" (every address the name has, with the
// balancer of the dial options), or a scheme of a resolver registered with
// google.golang.org/grpc/resolver. Connections are lazy: a service down now is dialled again on
// the next call. The demo runs in the clear on loopback: every call is signed (grpccall's
// WithSecret), but not encrypted; between hosts, give grpc.NewClient TLS credentials
// (credentials.NewTLS), or mutual TLS (docs/security.md).
func (s *service) dial() (closeAll func(), err error) {
	s.conns = map[string]*grpc.ClientConn{}
	closeAll = func() {
		for _, c := range s.conns {
			_ = c.Close()
		}
	}
	for name, target := range map[string]string{"stock": s.c.stock, "account": s.c.account} {
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, err
		}
		s.conns[name] = cc
	}
	return closeAll, nil
}

// methods are the gRPC methods of each op of the stock and account services (shop.proto).
var methods = map[string]grpccall.Methods{
	"stock": {
		participant.OpTry: shoppb.Stock_Try_FullMethodName, participant.OpConfirm: shoppb.Stock_Confirm_FullMethodName,
		participant.OpCancel: shoppb.Stock_Cancel_FullMethodName, participant.OpAction: shoppb.Stock_Action_FullMethodName,
		participant.OpCompensate: shoppb.Stock_Compensate_FullMethodName,
	},
	"account": {
		participant.OpTry: shoppb.Account_Try_FullMethodName, participant.OpConfirm: shoppb.Account_Confirm_FullMethodName,
		participant.OpCancel: shoppb.Account_Cancel_FullMethodName, participant.OpAction: shoppb.Account_Action_FullMethodName,
		participant.OpCompensate: shoppb.Account_Compensate_FullMethodName,
	},
}

// grpcParticipants registers stock and account with coord as gRPC participants (a method per op,
// TCC and saga alike: shop.proto; every call signed with the service's secret) and returns the
// handles a branch names. Every instance registers them under the same names ("stock",
// "account"): the leader that recovers a branch another instance began calls the participant
// registered here under the branch's name.
func (s *service) grpcParticipants(coord registrar) (stock, account participant.Participant, err error) {
	var out [2]participant.Participant
	for i, name := range []string{"stock", "account"} {
		p, err := grpccall.New(s.conns[name], methods[name], grpccall.WithSecret(s.secret))
		if err != nil {
			return nil, nil, err
		}
		if out[i], err = coord.Register(name, p); err != nil {
			return nil, nil, err
		}
	}
	return out[0], out[1], nil
}

// grpcPayloads returns the payloads of order o's stock and account branches: their shoppb
// request messages, serialized (grpccall.Payload).
func grpcPayloads(o Order) (stock, account json.RawMessage, err error) {
	stock, err = grpccall.Payload(&shoppb.StockRequest{Sku: o.SKU, Qty: o.Qty})
	if err == nil {
		account, err = grpccall.Payload(&shoppb.AccountRequest{Account: o.Account, Amount: o.Amount})
	}
	return stock, account, err
}

// ordersServer serves shop.v1.Orders: Place is POST /orders over gRPC.
type ordersServer struct {
	shoppb.UnimplementedOrdersServer
	s *service
}

// Place places one order and answers its outcome in the reply (OK), as POST /orders does in its
// body; INVALID_ARGUMENT for a malformed order. The reply carries no error text: a cancelled,
// compensated or unknown order has a request id naming the log line with the error.
func (g ordersServer) Place(ctx context.Context, req *shoppb.PlaceRequest) (*shoppb.PlaceReply, error) {
	o := Order{SKU: req.GetSku(), Qty: req.GetQty(), Account: req.GetAccount(), Amount: req.GetAmount()}
	var err error
	if req.GetMode() != "" {
		err = o.Mode.Set(req.GetMode())
	}
	if err == nil {
		err = g.s.check(&o)
	}
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	a := g.s.placeWithin(ctx, o)
	return &shoppb.PlaceReply{Gid: a.GID, Mode: a.Mode.String(), Status: a.Status, Reason: a.Reason, RequestId: a.RequestID}, nil
}
