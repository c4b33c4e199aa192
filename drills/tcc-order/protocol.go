package main

import (
	"github.com/txkit/txkit/examples/tcc-order/app"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/workflow"
)

// protocol is what the harness and the checks need to know of a mode: where its coordinator
// keeps its log, the final statuses, and the ops the participants' ledgers hold.
type protocol struct {
	mode         app.Mode
	log          string // the coordinator's global table in the run's schema (the package's default prefix)
	unit, units  string // what one order runs as, for the report
	done, undone string // the final statuses: the order went through, or was rolled back
	// apply takes the amount from the free column (try, action); complete finishes it when the
	// order goes through (confirm; none for a saga, whose action is final); undo gives it back.
	apply, complete, undo participant.Op
	// ledgerRule says what audit checks, for the report.
	ledgerRule string
}

func protocolOf(m app.Mode) protocol {
	if m == app.ModeWorkflow { // a workflow's calls are a saga's ops
		return protocol{mode: m, log: "txkit_workflow_global", unit: "workflow", units: "workflows",
			done: workflow.StatusSucceeded.String(), undone: workflow.StatusCompensated.String(),
			apply: participant.OpAction, undo: participant.OpCompensate,
			ledgerRule: "no op applied twice, every call of a succeeded workflow kept, every call of a compensated one compensated, no compensation without its action"}
	}
	if m == app.ModeSaga {
		return protocol{mode: m, log: "txkit_saga_global", unit: "saga", units: "sagas",
			done: saga.StatusSucceeded.String(), undone: saga.StatusCompensated.String(),
			apply: participant.OpAction, undo: participant.OpCompensate,
			ledgerRule: "no op applied twice, every action of a succeeded saga kept, every action of a compensated one compensated, no compensation without its action"}
	}
	return protocol{mode: app.ModeTCC, log: "txkit_global", unit: "global transaction", units: "global transactions",
		done: tcc.StatusConfirmed.String(), undone: tcc.StatusCancelled.String(),
		apply: participant.OpTry, complete: participant.OpConfirm, undo: participant.OpCancel,
		ledgerRule: "no op applied twice, no branch both confirmed and cancelled, every try confirmed or cancelled with its transaction"}
}

// final reports whether status is one of the protocol's final statuses.
func (p protocol) final(status string) bool { return status == p.done || status == p.undone }

// audit counts what breaks the protocol in one participant's ledger, given the coordinator's
// statuses by gid:
//   - twice: an op of a branch applied more than once;
//   - both: a branch both completed and undone (TCC);
//   - unsettled: an order that went through without every op it needs, or a rolled back one
//     whose applied op was never undone;
//   - stray: an op against the outcome (completed although rolled back, undone although it went
//     through, undone without being applied) or for a gid the coordinator never recorded.
func (p protocol) audit(l ledger, statuses map[string]string) (twice, both, unsettled, stray int) {
	n := func(ops map[string]int, op participant.Op) int {
		if op == 0 {
			return 0
		}
		return ops[op.String()]
	}
	for gid, ops := range l {
		for _, c := range ops {
			if c > 1 {
				twice++
			}
		}
		if n(ops, p.complete) > 0 && n(ops, p.undo) > 0 {
			both++
		}
		if n(ops, p.undo) > 0 && n(ops, p.apply) == 0 {
			stray++
		}
		if _, ok := statuses[gid]; !ok {
			stray++
		}
	}
	for gid, st := range statuses {
		ops := l[gid]
		switch st {
		case p.done:
			if n(ops, p.apply) == 0 || (p.complete != 0 && n(ops, p.complete) == 0) {
				unsettled++
			}
			if n(ops, p.undo) > 0 {
				stray++
			}
		case p.undone:
			if n(ops, p.apply) > 0 && n(ops, p.undo) == 0 {
				unsettled++
			}
			if n(ops, p.complete) > 0 {
				stray++
			}
		}
	}
	return twice, both, unsettled, stray
}

// countUndone counts the branches of l applied and then undone.
func (p protocol) countUndone(l ledger) int {
	n := 0
	for _, ops := range l {
		if ops[p.apply.String()] > 0 && ops[p.undo.String()] > 0 {
			n++
		}
	}
	return n
}
