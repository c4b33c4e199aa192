package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/transfer/app"
	"github.com/txkit/txkit/threepc"
)

// newThreePC builds the 3pc coordinator on the log's pool and migrates its tables. The agents
// beside the databases (examples/transfer/agent) must run with -timeout equal to
// -participant-timeout.
func newThreePC(ctx context.Context, c config, logPool *pgxpool.Pool, hook phaseHook, opts []coordinator.Option) (*threepc.Coordinator, error) {
	opts = append(opts, threepc.WithTimeouts(c.canCommitTimeout, c.preCommitTimeout, c.participantTimeout))
	if hook != nil {
		opts = append(opts, phaseOption(hook))
	}
	return migrated(ctx, threepc.New, logPool, opts)
}

// errInsufficientFunds: east's CanCommit found the balance below the amount.
var errInsufficientFunds = errors.New("insufficient funds")

// missingAccount is a CanCommit's "no": the account does not exist in its database.
type missingAccount struct{ account string }

func (e *missingAccount) Error() string        { return "no such account: " + e.account }
func (e *missingAccount) Is(target error) bool { return target == errNoAccount }

// canCommit returns a side's CanCommit: a read (in the READ ONLY transaction threepc gives it)
// that answers no when the account does not exist or, for the debit, holds less than amount.
// Nothing is locked: a concurrent transfer may still take the money before PreCommit, whose
// CHECK (balance >= 0) then refuses.
func canCommit(account string, debit int64) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		var balance int64
		err := tx.QueryRow(ctx, `select balance from accounts where id = $1`, account).Scan(&balance)
		if errors.Is(err, pgx.ErrNoRows) {
			return &missingAccount{account: account}
		}
		if err != nil {
			return err
		}
		if balance < debit {
			return fmt.Errorf("%s holds %d, less than %d: %w", account, balance, debit, errInsufficientFunds)
		}
		return nil
	}
}

// transfer3PC: the transfer as a three-phase commit. Enlist runs nothing: Commit asks both
// databases CanCommit (read-only checks), records the transaction, runs each side's move and
// PREPARE TRANSACTION (PreCommit), records the decision and commits both prepared transactions
// (DoCommit). The answers are those of the 2pc path; a CanCommit's "no" aborts before anything
// was executed.
func (s *service) transfer3PC(ctx context.Context, w http.ResponseWriter, t app.Transfer, bopts []coordinator.BeginOption) {
	g, err := s.three.Begin(ctx, bopts...)
	if s.beginFailed(w, t, err) {
		return
	}
	gid := g.GID()
	// East before west, as in 2pc: PreCommit takes the row locks in this order.
	err = g.Enlist("east", threepc.DBWork{CanCommit: canCommit(t.From, t.Amount), PreCommit: move(gid, t.From, -t.Amount)})
	if err == nil {
		err = g.Enlist("west", threepc.DBWork{CanCommit: canCommit(t.To, 0), PreCommit: move(gid, t.To, t.Amount)})
	}
	if err != nil {
		if aerr := g.Abort(ctx); aerr != nil {
			s.log.Warn("abort failed", "gid", gid, "err", aerr)
		}
		s.fail(w, http.StatusServiceUnavailable, app.Answer{GID: gid, Status: "aborted"}, "the transfer failed and was rolled back; try again", err)
		return
	}
	var missing *missingAccount
	switch err := g.Commit(ctx); {
	case err == nil:
		exapp.WriteJSON(w, http.StatusOK, app.Answer{GID: gid, Status: "committed"})
	case errors.Is(err, errInsufficientFunds) || insufficientFunds(err):
		// CanCommit said no, or a concurrent transfer took the money before PreCommit.
		exapp.WriteJSON(w, http.StatusConflict, app.Answer{GID: gid, Status: "refused", Error: "insufficient funds in " + t.From})
	case errors.As(err, &missing):
		exapp.WriteJSON(w, http.StatusNotFound, app.Answer{GID: gid, Status: "rejected", Error: "no such account: " + missing.account})
	case errors.Is(err, threepc.ErrAborted) && errors.Is(err, threepc.ErrPhaseTimeout):
		// A database did not answer a phase in time (overloaded, partitioned): rolled back.
		s.fail(w, http.StatusConflict, app.Answer{GID: gid, Status: "aborted"}, "a database did not answer in time; the transfer was rolled back", err)
	case errors.Is(err, threepc.ErrAborted):
		// A phase failed otherwise (a database down): rolled back everywhere, safe to try again.
		s.fail(w, http.StatusServiceUnavailable, app.Answer{GID: gid, Status: "aborted"}, "the transfer failed and was rolled back; try again", err)
	case errors.Is(err, coordinator.ErrIncomplete):
		// Decided to commit; DoCommit failed somewhere: the leader (or the agent) finishes it.
		exapp.WriteJSON(w, http.StatusOK, app.Answer{GID: gid, Status: "committed"})
	default: // ErrInDoubt and the like: the leader and the agents settle it
		s.fail(w, http.StatusInternalServerError, app.Answer{GID: gid, Status: "unknown"}, "outcome not known yet; the recovery settles it (GET /transfers/{gid})", err)
	}
}
