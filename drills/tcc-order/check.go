package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/tcc-order/app"
)

type orderRow struct {
	status, sku, account string
	qty, amount          int64
}

// ledger is one service's applied ops: gid → op → times applied.
type ledger map[string]map[string]int

type namedLedger struct {
	name string
	l    ledger
}

func (l ledger) rows() int {
	n := 0
	for _, ops := range l {
		for _, c := range ops {
			n += c
		}
	}
	return n
}

func connect(ctx context.Context, base, db, schema string) (*pgx.Conn, error) {
	url, err := exapp.DatabaseURL(base, db, schema, 0)
	if err != nil {
		return nil, err
	}
	return pgx.Connect(ctx, url)
}

func readLedger(ctx context.Context, c *pgx.Conn, table string) (ledger, error) {
	rows, err := c.Query(ctx, `select gid, op, count(*) from `+pgx.Identifier{table}.Sanitize()+` group by gid, op`)
	if err != nil {
		return nil, err
	}
	l := ledger{}
	var gid, op string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&gid, &op, &n}, func() error {
		if l[gid] == nil {
			l[gid] = map[string]int{}
		}
		l[gid][op] = n
		return nil
	})
	return l, err
}

// balances reads key → (free, held, used) of the stock or account table.
func balances(ctx context.Context, c *pgx.Conn, q string) (map[string][3]int64, error) {
	rows, err := c.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	out := map[string][3]int64{}
	var k string
	var a, b, d int64
	_, err = pgx.ForEachRow(rows, []any{&k, &a, &b, &d}, func() error {
		out[k] = [3]int64{a, b, d}
		return nil
	})
	return out, err
}

// check reads the three databases and fills rep with the numbers and the invariants.
func (h *harness) check(ctx context.Context, rep *Report) error {
	p := h.proto
	oc, err := connect(ctx, h.cfg.PG, dbOrder, h.schema)
	if err != nil {
		return err
	}
	defer oc.Close(context.WithoutCancel(ctx))
	sc, err := connect(ctx, h.cfg.PG, dbStock, h.schema)
	if err != nil {
		return err
	}
	defer sc.Close(context.WithoutCancel(ctx))
	ac, err := connect(ctx, h.cfg.PG, dbAccount, h.schema)
	if err != nil {
		return err
	}
	defer ac.Close(context.WithoutCancel(ctx))

	fail := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	ok := func(format string, args ...any) { rep.Checks = append(rep.Checks, fmt.Sprintf(format, args...)) }

	// The coordinator's log and the order rows.
	statuses := map[string]string{}
	rows, err := oc.Query(ctx, `select gid, status from `+pgx.Identifier{p.log}.Sanitize())
	if err != nil {
		return err
	}
	var gid, st string
	if _, err := pgx.ForEachRow(rows, []any{&gid, &st}, func() error { statuses[gid] = st; return nil }); err != nil {
		return err
	}
	rep.Globals = map[string]int{}
	for _, s := range statuses {
		rep.Globals[s]++
	}
	orders := map[string]orderRow{}
	rows, err = oc.Query(ctx, `select gid, status, sku, qty, account, amount from orders where mode = $1`, p.mode.String())
	if err != nil {
		return err
	}
	var o orderRow
	if _, err := pgx.ForEachRow(rows, []any{&gid, &o.status, &o.sku, &o.qty, &o.account, &o.amount}, func() error {
		orders[gid] = o
		return nil
	}); err != nil {
		return err
	}
	rep.OrderRows = map[string]int{}
	for _, o := range orders {
		rep.OrderRows[o.status]++
	}

	if n := len(statuses) - rep.Globals[p.done] - rep.Globals[p.undone]; n != 0 {
		fail("%d %s neither %s nor %s", n, p.units, p.done, p.undone)
	} else {
		ok("every %s %s or %s (%d + %d)", p.unit, p.done, p.undone, rep.Globals[p.done], rep.Globals[p.undone])
	}
	// The checks below look at finished transactions only; unfinished ones failed the check above.
	final := func(gid string) bool { return p.final(statuses[gid]) }
	h.checkOrderRows(statuses, orders, rep, ok, fail)
	wrong, answers := 0, 0
	h.answers.Range(func(k, v any) bool {
		if !final(k.(string)) {
			return true
		}
		answers++
		if statuses[k.(string)] != v.(string) {
			wrong++
		}
		return true
	})
	if wrong != 0 {
		fail("%d of %d answers to the client differ from the final outcome", wrong, answers)
	} else {
		ok("every answer the client got about a finished %s (%d) is its outcome", p.unit, answers)
	}

	// Ledgers: each op of each branch applied at most once, and settled with its outcome.
	sl, err := readLedger(ctx, sc, app.Stock().Ledger())
	if err != nil {
		return err
	}
	al, err := readLedger(ctx, ac, app.Account().Ledger())
	if err != nil {
		return err
	}
	ol, err := readLedger(ctx, oc, "order_ledger")
	if err != nil {
		return err
	}
	rep.LedgerStock, rep.LedgerAccount, rep.LedgerOrder = sl.rows(), al.rows(), ol.rows()
	ledgers := []namedLedger{{"stock", sl}, {"account", al}}
	if p.mode == app.ModeTCC { // the order service is a branch of its own only in TCC
		ledgers = append(ledgers, namedLedger{"order", ol})
	}
	rep.Undone = map[string]int{}
	for _, svc := range ledgers {
		rep.Undone[svc.name] = p.countUndone(svc.l)
		twice, both, unsettled, stray := p.audit(svc.l, statuses)
		if twice+both+unsettled+stray != 0 {
			fail("%s ledger: %d ops applied twice, %d branches both completed and undone, %d branches not settled with their outcome, %d ops against the outcome",
				svc.name, twice, both, unsettled, stray)
		} else {
			ok("%s: %s (%d ledger rows)", svc.name, p.ledgerRule, svc.l.rows())
		}
	}

	// Conservation.
	stock, err := balances(ctx, sc, app.Stock().BalancesQuery())
	if err != nil {
		return err
	}
	money, err := balances(ctx, ac, app.Account().BalancesQuery())
	if err != nil {
		return err
	}
	soldBy, spentBy := map[string]int64{}, map[string]int64{}
	for g, o := range orders {
		if statuses[g] == p.done {
			soldBy[o.sku] += o.qty
			spentBy[o.account] += o.amount
			rep.DoneQty += o.qty
			rep.DoneAmount += o.amount
		}
	}
	conserve := func(what string, initial map[string]int64, now map[string][3]int64, used map[string]int64, total *int64, free, held, usedSum *int64) {
		bad := 0
		for k, init := range initial {
			v := now[k]
			*total += init
			*free += v[0]
			*held += v[1]
			*usedSum += v[2]
			if v[0]+v[1]+v[2] != init || v[1] != 0 || v[2] != used[k] {
				bad++
				fail("%s %s: initial %d, now %d + held %d + used %d; %s orders used %d", what, k, init, v[0], v[1], v[2], p.done, used[k])
			}
		}
		if bad == 0 {
			ok("%s conserved for all %d keys: initial = free + held + used, held = 0, used = what %s orders took", what, len(initial), p.done)
		}
	}
	conserve("stock", h.skus, stock, soldBy, &rep.InitialStock, &rep.Available, &rep.Reserved, &rep.Sold)
	conserve("money", h.accts, money, spentBy, &rep.InitialMoney, &rep.Balance, &rep.Frozen, &rep.Spent)

	// Faults the participants injected.
	if h.cfg.Drill {
		for _, svc := range []struct {
			name string
			dst  *map[string]int64
		}{{"stock", &rep.StockFaults}, {"account", &rep.AccountFaults}} {
			var st struct{ Faults map[string]int64 }
			_ = h.getJSON(ctx, "http://"+h.participant(svc.name).addr+"/stats", &st)
			m := map[string]int64{}
			h.mu.Lock()
			for _, kind := range []string{"refused", "failed", "lost", "slowed"} {
				m[kind] = st.Faults[kind] + h.faults[svc.name+"."+kind]
			}
			h.mu.Unlock()
			*svc.dst = m
		}
	}
	return nil
}

// checkOrderRows checks the order rows against the coordinator's statuses (a workflow's: below).
// In TCC the order
// branch gives each row its transaction's outcome. A saga's order row is recorded before the
// saga, and its outcome is the saga's: every saga must have its row, and a row without a saga is
// an order whose starter was killed before it submitted the saga (nothing ran).
func (h *harness) checkOrderRows(statuses map[string]string, orders map[string]orderRow, rep *Report, ok, fail func(string, ...any)) {
	p := h.proto
	if p.mode == app.ModeWorkflow {
		// The row is the workflow's first step: every succeeded workflow has it, and every row
		// its workflow; a compensated one may lack it (its deadline passed before the first step).
		missing, orphans := 0, 0
		for g, st := range statuses {
			if _, found := orders[g]; !found && st == p.done {
				missing++
			}
		}
		for g := range orders {
			if _, found := statuses[g]; !found {
				orphans++
			}
		}
		if missing+orphans != 0 {
			fail("%d succeeded workflows without their order row, %d order rows without a workflow", missing, orphans)
		} else {
			ok("every succeeded workflow (%d) has its order row (its first step), every order row (%d) its workflow", rep.Globals[p.done], len(orders))
		}
		return
	}
	if p.mode == app.ModeSaga {
		missing := 0
		for g := range statuses {
			if _, found := orders[g]; !found {
				missing++
			}
		}
		for g := range orders {
			if _, found := statuses[g]; !found {
				rep.Unsubmitted++
			}
		}
		if missing != 0 {
			fail("%d sagas without their order row", missing)
		} else {
			ok("every saga (%d) has its order row; %d order rows without a saga (starter killed before submitting)", len(statuses), rep.Unsubmitted)
		}
		return
	}
	mismatch, settled := 0, 0
	for g, o := range orders {
		if !p.final(statuses[g]) {
			continue
		}
		settled++
		if statuses[g] != o.status {
			mismatch++
		}
	}
	if mismatch != 0 {
		fail("%d order rows whose status differs from their finished transaction's", mismatch)
	} else {
		ok("every order row of a finished transaction (%d) has its outcome", settled)
	}
}
