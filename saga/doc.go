// Package saga is a saga coordinator on PostgreSQL: steps run their actions in order (or as
// their dependencies allow, several at once), and when one is refused the steps already done are
// compensated in reverse. The saga and all its steps are written before any action runs, the
// steps' successes when the saga moves on (succeeded, compensating, or stalled) or its lease needs
// renewing, and the elected leader ([Coordinator.Run] under a [lock.Elector]) finishes whatever a
// starter left unfinished — running sagas forward, compensating sagas backward.
//
//	client, _ := participant.NewSigningClient(secret, nil) // signs for the participants' barrier
//	c, _ := saga.New(pool, coordinator.WithSchema("shop"), coordinator.WithElector(el), coordinator.WithHTTPClient(client))
//	_ = c.Migrate(ctx)
//	go c.Run(ctx) // recovery, on the leader only
//	stock, _ := c.Register("stock", stockParticipant) // in-process, found by name when recovering
//	s, _ := c.Begin(coordinator.WithTimeout(time.Minute))
//	_ = s.Add(saga.Step{Name: "stock", Participant: stock, Payload: body})
//	_ = s.Add(saga.Step{Name: "pay", Participant: participant.HTTP{URL: payURL, Client: client}}) // after stock
//	err := s.Submit(ctx) // nil: succeeded; ErrRefused: compensated; coordinator.ErrIncomplete: the leader carries on
//
// # A step over HTTP
//
// A step is one participant and so one URL: the action and the compensation are POSTed to it,
// and the handler switches on the request's Op. Behind barrier.Barrier.Handler (which
// makes both idempotent, and a compensation without its action an empty one):
//
//	bar, _ := barrier.New(pool, barrier.WithSecrets(secret))
//	_ = bar.Migrate(ctx)
//	http.Handle("/pay", bar.Handler(func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
//		switch req.Op {
//		case participant.OpAction: // debit; a business "no" wraps participant.ErrRefused (HTTP 409)
//			tag, err := tx.Exec(ctx, `update wallet set balance = balance - 10 where id = $1 and balance >= 10`, user)
//			if err == nil && tag.RowsAffected() == 0 {
//				return fmt.Errorf("insufficient funds: %w", participant.ErrRefused)
//			}
//			return err
//		case participant.OpCompensate: // credit back
//			_, err := tx.Exec(ctx, `update wallet set balance = balance + 10 where id = $1`, user)
//			return err
//		}
//		return fmt.Errorf("op %s: %w", req.Op, participant.ErrBadRequest)
//	}, barrier.WithAllowedOps(participant.OpAction, participant.OpCompensate)))
//
// When pay refuses, Submit returns "saga: step pay: participant: action <gid>/pay at <URL>:
// participant: refused: insufficient funds" (a *[coordinator.BranchError] wrapping
// [participant.ErrRefused]), after compensating stock — and pay itself: the refused step's own
// compensation is called too (every step whose action may have run is compensated, see
// Failures). Its action rolled back, so the barrier finds nothing to undo and answers success
// without calling the function: an empty rollback.
//
// # Order
//
// A step depends by default on the step added before it ([Step.DependsOn] nil): the saga is
// sequential. DependsOn names other steps (added before it, so there are no cycles), or none
// (an empty slice); steps whose dependencies have succeeded run together, at most
// [coordinator.WithConcurrency] at once. Compensations run in reverse: a step's compensation starts only
// after the compensations of every step that depends on it have succeeded; among those ready,
// the step that completed last goes first (the leader, which does not know the completion order
// of an earlier drive, takes the later step first).
//
// # Failures
//
// A participant answers an action with success, a refusal ([participant.ErrRefused], HTTP 409:
// a business failure) or anything else (a transient failure, HTTP 500, a timeout: the outcome is
// unknown).
//
//   - A refusal moves the saga to compensating at once, recording the successes so far. The
//     steps compensated are those whose action succeeded and those whose action may have run.
//     Submit, which saw the whole drive, adds the pending steps with every dependency succeeded
//     — the refused step, a step that failed or was in flight — and leaves the steps beyond them
//     (never run) alone. A leader recovering the saga cannot know which unrecorded steps ran
//     (successes are not recorded one by one, see below), so it compensates every step not
//     recorded as compensated. A compensation may therefore reach a participant whose action never
//     ran or never arrived: compensations must be idempotent and accept that case, which
//     barrier.Barrier does (and it refuses an action arriving after its compensation).
//   - A transient failure is retried: [Saga.Submit] calls up to [WithAttempts] times with
//     backoff, then records the failure and returns [coordinator.ErrIncomplete]; the leader retries with
//     exponential backoff and jitter, counted per step (attempts, last error), never dropped.
//   - A failed compensation is retried the same way until it succeeds; a refused one breaks the
//     protocol and is counted ([coordinator.Stats] Violations), logged and retried.
//
// # Timeout
//
// The saga's timeout ([coordinator.WithTimeout], counted from Submit) bounds its forward phase. A saga still
// running when it passes is compensated, as if its pending action had been refused: by Submit
// (which cancels the actions in flight and returns [coordinator.ErrTimeout]), or by the leader, which
// compares the timeout with PostgreSQL's clock when it claims the saga and bounds its own forward
// drive by what is left. Compensations are not bounded: they are retried until they succeed.
//
// # PostgreSQL writes per saga
//
// A saga that succeeds costs 2 writes, each its own commit, whatever its number of steps: Submit
// inserts the saga and its steps in one statement, and one statement marks it succeeded — the
// saga's row only: a saga succeeds only once every step has, so Status reports each step
// succeeded as of that write, and the step rows are left as they are. Steps' successes are not recorded one by one: participants must be
// idempotent anyway (the barrier), so a leader that recovers a saga whose starter died re-sends
// the actions not recorded as done — duplicates answer success without effect — and, when it
// must compensate, treats every step not recorded as possibly run: a compensation for a step that
// never ran is an empty compensation, which the barrier answers without touching business data.
// A drive longer than half the lease records its progress to renew the lease. A compensated saga
// costs 3: the insert, the move to compensating (with the successes so far), and the finish.
// Given [coordinator.WithDeferredFinish], the finish is written in the background and Submit
// returns once the last action succeeded: one commit less on the caller's path (the leader
// finishes a saga whose finish was lost, re-sending its actions).
//
// # Tracing
//
// Given [coordinator.WithTracerProvider] (default: the application's global OpenTelemetry
// provider), [Saga.Submit] records the saga under a span "saga begin" (attribute txkit.gid), the
// child of Submit's ctx, and stores that span's trace context with the saga; each call is a
// client span "saga action" or "saga compensate" (txkit.gid, txkit.branch, txkit.op; a refusal
// or failure recorded, status Error), also a child of Submit's ctx. The participant continues
// it: an HTTP participant behind barrier.Barrier.Handler in a server span "participant
// <op>", an in-process one from barrier.Barrier.Participant in an internal span of that
// name. A saga the leader finishes is driven under a span "recovery drive", the child of the
// stored context — so the leader's actions and compensations, hours later and in another
// process, are in the trace of the request that submitted the saga — with a link to the leader's
// "recovery pass" span (see package coordinator). The drive logs with its ctx and Submit with
// its own (InfoContext, ...): "saga: compensating" and the others carry trace_id and span_id
// under a handler that reads them (tracelog.Handler).
//
// Coordinator is safe for concurrent use by multiple goroutines; a [Saga] is built and
// submitted by one goroutine.
package saga
