package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/examples/tcc-order/app"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
)

// sagaFlow places orders as sagas, with a saga.Coordinator recovering under el.
func (s *service) sagaFlow(ctx context.Context, el lock.Elector) (*flow, error) {
	coord, err := newCoordinator(ctx, s, el, saga.New, optionsOf())
	if err != nil {
		return nil, err
	}
	stock, account, err := s.participants(coord, app.ModeSaga)
	if err != nil {
		return nil, err
	}
	o := &sagaOrders{s: s, coord: coord, stock: stock, account: account}
	return &flow{el: el, run: flushed(coord), place: o.place, stats: func() any { return coord.Stats() },
		status: func(ctx context.Context, gid string) (fmt.Stringer, error) { return coord.Status(ctx, gid) }}, nil
}

// sagaOrders places orders as sagas.
type sagaOrders struct {
	s              *service
	coord          *saga.Coordinator
	stock, account participant.Participant
}

// place records order o, then runs it as a saga of two sequential steps: deduct the stock, then
// debit the account. A refusal of either (or the saga's timeout) compensates what ran, in
// reverse: the account's refusal gives the stock back. The order row keeps status "placed": its
// outcome is the saga's, in the coordinator's log (GET /orders/{gid} shows both).
func (t *sagaOrders) place(ctx context.Context, o Order) answer {
	sg, err := t.coord.Begin(ctx)
	if err != nil {
		return t.s.failed("", err)
	}
	gid := sg.GID()
	// Recorded before the saga: a starter killed in between leaves an order that never ran.
	if err := record(ctx, t.s.pool, gid, o, app.ModeSaga, "placed"); err != nil {
		return t.s.failed(gid, err)
	}
	stockP, accountP, err := t.s.payloads(o)
	if err == nil {
		err = errors.Join(
			sg.Add(saga.Step{Name: "stock", Participant: t.stock, Payload: stockP}),
			sg.Add(saga.Step{Name: "account", Participant: t.account, Payload: accountP}))
	}
	if err == nil {
		err = sg.Submit(ctx)
	}
	switch {
	case err == nil:
		return answer{code: http.StatusOK, GID: gid, Status: saga.StatusSucceeded.String()}
	case errors.Is(err, participant.ErrRefused) || errors.Is(err, coordinator.ErrTimeout):
		// Decided: compensations that failed (ErrIncomplete too) are retried by the leader until
		// they succeed.
		return t.s.undone(gid, saga.StatusCompensated.String(), err, "timeout")
	default:
		// Recorded but not finished (ErrIncomplete): the leader carries it forward until its
		// timeout, then compensates.
		return t.s.failed(gid, err)
	}
}
