package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/examples/tcc-order/app"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/tcc"
)

// tccFlow places orders as TCC global transactions, with a tcc.Coordinator recovering under el.
// The order service's own branch runs in-process behind bar.
func (s *service) tccFlow(ctx context.Context, el lock.Elector, bar *barrier.Barrier) (*flow, error) {
	coord, err := newCoordinator(ctx, s, el, tcc.New, optionsOf())
	if err != nil {
		return nil, err
	}
	// Every instance registers the order branch under the same name: the leader that recovers a
	// transaction calls it in its own process.
	self, err := coord.Register("order", bar.Participant(orderBranch))
	if err != nil {
		return nil, err
	}
	stock, account, err := s.participants(coord, app.ModeTCC)
	if err != nil {
		return nil, err
	}
	t := &tccOrders{s: s, coord: coord, self: self, stock: stock, account: account}
	return &flow{el: el, run: flushed(coord), place: t.place, stats: func() any { return coord.Stats() },
		status: func(ctx context.Context, gid string) (fmt.Stringer, error) { return coord.Status(ctx, gid) }}, nil
}

// tccOrders places orders as TCC global transactions.
type tccOrders struct {
	s                    *service
	coord                *tcc.Coordinator
	self, stock, account participant.Participant
}

// place runs order o as one global transaction: the order branch's try first (it records the
// order), then the stock and account tries in parallel; Commit when all succeed, Rollback
// otherwise.
func (t *tccOrders) place(ctx context.Context, o Order) answer {
	g, err := t.coord.Begin(ctx)
	if err != nil {
		return t.s.failed("", err)
	}
	gid := g.GID()
	body, _ := json.Marshal(o)
	stockP, accountP, err := t.s.payloads(o)
	if err != nil {
		return t.s.failed(gid, err)
	}
	err = g.Try(ctx, tcc.Branch{Name: "order", Participant: t.self, Payload: body})
	if err == nil {
		var serr, aerr error
		var wg sync.WaitGroup
		wg.Go(func() {
			serr = g.Try(ctx, tcc.Branch{Name: "stock", Participant: t.stock, Payload: stockP})
		})
		wg.Go(func() {
			aerr = g.Try(ctx, tcc.Branch{Name: "account", Participant: t.account, Payload: accountP})
		})
		wg.Wait()
		err = errors.Join(serr, aerr)
	}
	if err != nil {
		if rerr := g.Rollback(ctx); rerr != nil && !errors.Is(rerr, coordinator.ErrIncomplete) {
			t.s.log.WarnContext(ctx, "rollback failed; the leader cancels at the timeout", "gid", gid, "err", rerr)
			return t.s.failed(gid, rerr)
		}
		return t.s.undone(gid, tcc.StatusCancelled.String(), err, "failed")
	}
	switch err := g.Commit(ctx); {
	case err == nil || errors.Is(err, coordinator.ErrIncomplete):
		// Decided: confirms that failed are retried by the leader.
		return answer{code: http.StatusOK, GID: gid, Status: tcc.StatusConfirmed.String()}
	case errors.Is(err, coordinator.ErrInvalidState):
		// Cancelled by its timeout before the commit was recorded.
		return t.s.undone(gid, tcc.StatusCancelled.String(), err, "timeout")
	default:
		return t.s.failed(gid, err)
	}
}

// orderBranch is the order service's own branch: try records the order pending, confirm and
// cancel settle it. The barrier runs each at most once, in this transaction.
func orderBranch(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	var o Order
	if err := json.Unmarshal(req.Payload, &o); err != nil {
		return fmt.Errorf("order payload: %w: %w", participant.ErrBadRequest, err)
	}
	var err error
	switch req.Op {
	case participant.OpTry:
		err = record(ctx, tx, req.GID, o, app.ModeTCC, "pending")
	case participant.OpConfirm:
		err = settle(ctx, tx, req.GID, tcc.StatusConfirmed)
	case participant.OpCancel:
		err = settle(ctx, tx, req.GID, tcc.StatusCancelled)
	default:
		return fmt.Errorf("order: op %s: %w", req.Op, participant.ErrBadRequest)
	}
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `insert into order_ledger (gid, branch, op) values ($1, $2, $3)`, req.GID, req.Branch, req.Op.String())
	return err
}

// settle gives the order row of gid its transaction's outcome.
func settle(ctx context.Context, tx pgx.Tx, gid string, st coordinator.Status) error {
	_, err := tx.Exec(ctx, `update orders set status = $2, updated_at = clock_timestamp() where gid = $1`, gid, st.String())
	return err
}
