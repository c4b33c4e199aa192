package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/txkit/txkit/examples/tcc-order/app"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/workflow"
)

// workflowFlow places orders as workflows, with a workflow.Coordinator resuming under el the
// workflows whose instance died.
func (s *service) workflowFlow(ctx context.Context, el lock.Elector) (*flow, error) {
	coord, err := newCoordinator(ctx, s, el, workflow.New, optionsOf())
	if err != nil {
		return nil, err
	}
	stock, account, err := s.participants(coord, app.ModeWorkflow)
	if err != nil {
		return nil, err
	}
	o := &workflowOrders{s: s, coord: coord, stock: stock, account: account}
	// Every instance registers the function: the leader replays it for an instance that died.
	if err := workflow.Register(coord, "order", o.order); err != nil {
		return nil, err
	}
	return &flow{el: el, run: coord.Run, place: o.place, stats: func() any { return coord.Stats() },
		status: func(ctx context.Context, gid string) (fmt.Stringer, error) { return coord.Status(ctx, gid) }}, nil
}

// workflowOrders places orders as workflows.
type workflowOrders struct {
	s              *service
	coord          *workflow.Coordinator
	stock, account participant.Participant
}

// order is the workflow of one order, an ordinary Go function: record the order row (a local
// step), deduct the stock, then debit the account (participant calls, compensated in reverse when
// a later one is refused or the deadline passes). Each step's outcome is in the log before the
// function goes on, so a replay by the leader skips what was done. It must make the same steps
// in the same order every time it runs for one order: it decides only on its input and on what
// its steps returned.
func (t *workflowOrders) order(ctx workflow.Context, o Order) (string, error) {
	if _, err := workflow.Step(ctx, "record", func(c context.Context) (bool, error) {
		// Idempotent: a run killed after the insert and before the step's record inserts again.
		return true, recordOnce(c, t.s.pool, ctx.GID(), o, app.ModeWorkflow, "placed")
	}); err != nil {
		return "", err
	}
	stockP, accountP, err := t.s.payloads(o)
	if err != nil {
		return "", err
	}
	if err := workflow.Call(ctx, "stock", t.stock, stockP); err != nil {
		return "", err
	}
	if err := workflow.Call(ctx, "account", t.account, accountP); err != nil {
		return "", err
	}
	return "placed", nil
}

// place runs order o's workflow to its end. The order row keeps status "placed": its outcome is
// the workflow's, in the coordinator's log (GET /orders/{gid} shows both).
func (t *workflowOrders) place(ctx context.Context, o Order) answer {
	out, err := t.coord.Start(ctx, "order", o)
	gid := ""
	if out != nil {
		gid = out.GID
	}
	switch {
	case err == nil:
		return answer{code: http.StatusOK, GID: gid, Status: workflow.StatusSucceeded.String()}
	case errors.Is(err, workflow.ErrCompensated):
		// Decided: compensations that failed are retried by the leader until they succeed.
		return t.s.undone(gid, workflow.StatusCompensated.String(), err, "timeout")
	default:
		// Recorded but not finished (ErrIncomplete): the leader replays it.
		return t.s.failed(gid, err)
	}
}
