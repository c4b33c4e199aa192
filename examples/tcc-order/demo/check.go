package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/examples/tcc-order/internal/app"
)

type orderRow struct {
	status, sku, account string
	qty, amount          int64
}

// ledger is one service's applied ops: gid → op → times applied.
type ledger map[string]map[string]int

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
	url, err := app.DatabaseURL(base, db, schema)
	if err != nil {
		return nil, err
	}
	return pgx.Connect(ctx, url)
}

func readLedger(ctx context.Context, c *pgx.Conn, table string) (ledger, error) {
	rows, err := c.Query(ctx, `select gid, op, count(*) from `+table+` group by gid, op`)
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
	globals := map[string]string{}
	rows, err := oc.Query(ctx, `select gid, status from txkit_global`)
	if err != nil {
		return err
	}
	var gid, st string
	if _, err := pgx.ForEachRow(rows, []any{&gid, &st}, func() error { globals[gid] = st; return nil }); err != nil {
		return err
	}
	rep.Globals = map[string]int{}
	for _, s := range globals {
		rep.Globals[s]++
	}
	orders := map[string]orderRow{}
	rows, err = oc.Query(ctx, `select gid, status, sku, qty, account, amount from orders`)
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

	if n := len(globals) - rep.Globals["confirmed"] - rep.Globals["cancelled"]; n != 0 {
		fail("%d global transactions neither confirmed nor cancelled", n)
	} else {
		ok("every global transaction confirmed or cancelled (%d + %d)", rep.Globals["confirmed"], rep.Globals["cancelled"])
	}
	// The checks below look at finished transactions only; unfinished ones failed the check above.
	final := func(gid string) bool { return globals[gid] == "confirmed" || globals[gid] == "cancelled" }
	mismatch, settled := 0, 0
	for g, o := range orders {
		if !final(g) {
			continue
		}
		settled++
		if globals[g] != o.status {
			mismatch++
		}
	}
	if mismatch != 0 {
		fail("%d order rows whose status differs from their finished transaction's", mismatch)
	} else {
		ok("every order row of a finished transaction (%d) has its outcome", settled)
	}
	wrong, answers := 0, 0
	h.answers.Range(func(k, v any) bool {
		if !final(k.(string)) {
			return true
		}
		answers++
		if globals[k.(string)] != v.(string) {
			wrong++
		}
		return true
	})
	if wrong != 0 {
		fail("%d of %d answers to the client differ from the final outcome", wrong, answers)
	} else {
		ok("every answer the client got about a finished transaction (%d) is its outcome", answers)
	}

	// Ledgers: each op of each branch applied at most once, never both confirm and cancel, and
	// every confirmed (cancelled) transaction's tries confirmed (cancelled) everywhere.
	sl, err := readLedger(ctx, sc, "stock_ledger")
	if err != nil {
		return err
	}
	al, err := readLedger(ctx, ac, "account_ledger")
	if err != nil {
		return err
	}
	ol, err := readLedger(ctx, oc, "order_ledger")
	if err != nil {
		return err
	}
	rep.LedgerStock, rep.LedgerAccount, rep.LedgerOrder = sl.rows(), al.rows(), ol.rows()
	for _, svc := range []struct {
		name string
		l    ledger
	}{{"stock", sl}, {"account", al}, {"order", ol}} {
		twice, both, unsettled, stray := 0, 0, 0, 0
		for g, ops := range svc.l {
			for _, n := range ops {
				if n > 1 {
					twice++
				}
			}
			if ops["confirm"] > 0 && ops["cancel"] > 0 {
				both++
			}
			switch globals[g] {
			case "confirmed":
				if ops["try"] == 0 || ops["confirm"] == 0 || ops["cancel"] > 0 {
					stray++
				}
			case "cancelled":
				if ops["try"] > 0 && ops["cancel"] == 0 {
					unsettled++
				}
				if ops["confirm"] > 0 {
					stray++
				}
			case "":
				stray++ // an op for a transaction the coordinator never recorded
			}
		}
		for g, s := range globals {
			if s == "confirmed" && svc.l[g]["confirm"] == 0 {
				unsettled++
			}
		}
		if twice+both+unsettled+stray != 0 {
			fail("%s ledger: %d ops applied twice, %d branches both confirmed and cancelled, %d tries neither confirmed nor cancelled, %d ops against the outcome",
				svc.name, twice, both, unsettled, stray)
		} else {
			ok("%s: no op applied twice, no branch both confirmed and cancelled, every try confirmed or cancelled with its transaction (%d ledger rows)", svc.name, svc.l.rows())
		}
	}

	// Conservation.
	stock, err := balances(ctx, sc, `select sku, available, reserved, sold from stock`)
	if err != nil {
		return err
	}
	money, err := balances(ctx, ac, `select id, balance, frozen, spent from account`)
	if err != nil {
		return err
	}
	soldBy, spentBy := map[string]int64{}, map[string]int64{}
	for _, o := range orders {
		if o.status == "confirmed" {
			soldBy[o.sku] += o.qty
			spentBy[o.account] += o.amount
			rep.ConfirmedQty += o.qty
			rep.ConfirmedAmount += o.amount
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
				fail("%s %s: initial %d, now %d + held %d + used %d; confirmed orders used %d", what, k, init, v[0], v[1], v[2], used[k])
			}
		}
		if bad == 0 {
			ok("%s conserved for all %d keys: initial = free + held + used, held = 0, used = what confirmed orders took", what, len(initial))
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
