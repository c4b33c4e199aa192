package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/stock/shop"
)

// Phase is what one phase of the load measured.
type Phase struct {
	Orders, Deducted, Refused, Unanswered int
	Elapsed                               time.Duration
	P50, P99                              time.Duration // of the orders' latency (load phase only)
}

// PerSecond returns the orders answered per second.
func (p Phase) PerSecond() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Orders) / p.Elapsed.Seconds()
}

func (p Phase) String() string {
	s := fmt.Sprintf("%d deducted, %d refused, %d unanswered in %v (%.0f orders/s)", p.Deducted, p.Refused, p.Unanswered,
		p.Elapsed.Round(10*time.Millisecond), p.PerSecond())
	if p.P99 > 0 {
		s += fmt.Sprintf(", latency p50 %v p99 %v", p.P50.Round(100*time.Microsecond), p.P99.Round(100*time.Microsecond))
	}
	return s
}

// skuState is one SKU at the end of a run.
type skuState struct {
	initial, stock, sold int64 // sold: the sum of its stock_flow rows
	rows                 int
}

// Report is what a run measured and the checks it made.
type Report struct {
	Lock       string
	Schema     string           // the run's schema; its locks are named stock/<Schema>/<sku>
	Scenario   [][2]shop.Status // each round's answers to buyer A and buyer B
	Load       Phase
	Crash      Phase
	Kills      int
	Recoveries []time.Duration // a holder's SIGKILL → the answer of the deduction it held
	SKUs       map[string]skuState
	Orders     map[shop.Status]int // the order service's orders by status
	Checks     []string            // checks that hold
	Violations []string            // checks that do not
	Elapsed    time.Duration
}

// OK returns the broken checks as one error, an error when nothing was checked, or nil.
func (r Report) OK() error {
	var nothing error
	if len(r.Checks) == 0 {
		nothing = errors.New("nothing checked")
	}
	return drillkit.Verdict(r.Violations, nothing)
}

// scenarioOutcome says how the scenario's rounds went.
func (r Report) scenarioOutcome() string {
	n := map[string]int{}
	for _, sc := range r.Scenario {
		switch {
		case sc[0] == shop.Deducted && sc[1] == shop.Deducted:
			n["both served (oversold)"]++
		case sc[0] == shop.Deducted:
			n["A served"]++
		case sc[1] == shop.Deducted:
			n["B served"]++
		default:
			n["neither served"]++
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
	}
	return fmt.Sprintf("%d rounds: %s", len(r.Scenario), strings.Join(parts, ", "))
}

// MaxRecovery returns the longest recovery after a kill.
func (r Report) MaxRecovery() time.Duration { return drillkit.Longest(r.Recoveries) }

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lock:        %s\n", r.Lock)
	fmt.Fprintf(&b, "scenario:    %d in stock; A asks %d, B asks %d, at once: %s\n", scenarioStock, scenarioA, scenarioB, r.scenarioOutcome())
	fmt.Fprintf(&b, "load:        %d orders: %s\n", r.Load.Orders, r.Load)
	if r.Kills > 0 || r.Crash.Orders > 0 {
		ds := make([]string, len(r.Recoveries))
		for i, d := range r.Recoveries {
			ds[i] = d.Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "crash:       %d orders: %s\n", r.Crash.Orders, r.Crash)
		fmt.Fprintf(&b, "kills:       %d holders SIGKILLed; kill → the held deduction answered: %s\n", r.Kills, strings.Join(ds, ", "))
	}
	fmt.Fprintf(&b, "orders:      %s\n", statusCounts(r.Orders))
	b.WriteString("sku          initial   stock    sold  flow rows\n")
	for _, k := range slices.Sorted(maps.Keys(r.SKUs)) {
		s := r.SKUs[k]
		fmt.Fprintf(&b, "  %-10s %7d %7d %7d  %9d\n", k, s.initial, s.stock, s.sold, s.rows)
	}
	fmt.Fprintf(&b, "elapsed:     %v\n", r.Elapsed.Round(10*time.Millisecond))
	drillkit.WriteChecks(&b, r.Checks, r.Violations)
	return b.String()
}

func statusCounts(m map[shop.Status]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// flowRow is one stock_flow row joined with its order.
type flowRow struct {
	sku         string
	qty         int64
	orderStatus string // "" when no order has its op id
}

// check reads the tables and fills rep's numbers and checks.
func (h *harness) check(ctx context.Context, rep *Report) error {
	rows, err := h.pool.Query(ctx, `select s.sku, s.initial, s.stock, coalesce(sum(f.qty), 0), count(f.op_id)
		from sku s left join stock_flow f on f.sku = s.sku group by s.sku, s.initial, s.stock`)
	if err != nil {
		return err
	}
	rep.SKUs = map[string]skuState{}
	var sku string
	var st skuState
	if _, err := pgx.ForEachRow(rows, []any{&sku, &st.initial, &st.stock, &st.sold, &st.rows}, func() error {
		rep.SKUs[sku] = st
		return nil
	}); err != nil {
		return err
	}
	orders := map[string]flowRow{} // op id → the order as the order service recorded it
	rows, err = h.pool.Query(ctx, `select op_id, sku, qty, status from orders`)
	if err != nil {
		return err
	}
	rep.Orders = map[shop.Status]int{}
	var op string
	var o flowRow
	if _, err := pgx.ForEachRow(rows, []any{&op, &o.sku, &o.qty, &o.orderStatus}, func() error {
		orders[op] = o
		rep.Orders[shop.Status(o.orderStatus)]++
		return nil
	}); err != nil {
		return err
	}
	flow := map[string]flowRow{}
	rows, err = h.pool.Query(ctx, `select op_id, sku, qty from stock_flow`)
	if err != nil {
		return err
	}
	var f flowRow
	if _, err := pgx.ForEachRow(rows, []any{&op, &f.sku, &f.qty}, func() error {
		flow[op] = f
		return nil
	}); err != nil {
		return err
	}
	var rowCount int
	if err := h.pool.QueryRow(ctx, `select count(*) from stock_flow`).Scan(&rowCount); err != nil {
		return err
	}

	check := func(ok bool, good string, bad []string) {
		if ok {
			rep.Checks = append(rep.Checks, good)
		} else {
			rep.Violations = append(rep.Violations, bad...)
		}
	}

	// 1. Never oversold.
	var over []string
	for _, k := range slices.Sorted(maps.Keys(rep.SKUs)) {
		s := rep.SKUs[k]
		if s.stock < 0 || s.sold > s.initial {
			over = append(over, fmt.Sprintf("oversold: %s had %d, sold %d, stock %d", k, s.initial, s.sold, s.stock))
		}
	}
	check(len(over) == 0, fmt.Sprintf("never oversold: every SKU's stock >= 0 and sold <= initial (%d SKUs)", len(rep.SKUs)), over)

	// 2. Each operation applied at most once, and every deduction answered to a buyer on record.
	var twice []string
	if rowCount != len(flow) {
		twice = append(twice, fmt.Sprintf("applied twice: %d stock_flow rows for %d op ids", rowCount, len(flow)))
	}
	h.mu.Lock()
	seen := maps.Clone(h.seen)
	h.mu.Unlock()
	for _, op := range slices.Sorted(maps.Keys(orders)) {
		o := orders[op]
		fr, applied := flow[op]
		switch {
		case o.orderStatus == string(shop.Deducted) && !applied:
			twice = append(twice, fmt.Sprintf("lost: order %s answered deducted has no stock_flow row", op))
		case applied && (fr.sku != o.sku || fr.qty != o.qty):
			twice = append(twice, fmt.Sprintf("wrong: op %s deducted %d of %s for an order of %d of %s", op, fr.qty, fr.sku, o.qty, o.sku))
		case applied && o.orderStatus == string(shop.Refused):
			twice = append(twice, fmt.Sprintf("hidden: op %s was deducted but its order answered refused", op))
		}
		if seen[op] == shop.Deducted && !applied {
			twice = append(twice, fmt.Sprintf("lost: buyer got deducted for op %s, which has no stock_flow row", op))
		}
	}
	for op := range flow {
		if _, ok := orders[op]; !ok {
			twice = append(twice, fmt.Sprintf("stray: stock_flow row %s belongs to no order", op))
		}
	}
	check(len(twice) == 0, fmt.Sprintf("each operation applied at most once: %d stock_flow rows, one per op id, and each of the %d orders answered deducted has its row",
		rowCount, rep.Orders[shop.Deducted]), twice)

	// 3. Stock + sold = initial.
	var cons []string
	for _, k := range slices.Sorted(maps.Keys(rep.SKUs)) {
		s := rep.SKUs[k]
		if s.stock+s.sold != s.initial {
			cons = append(cons, fmt.Sprintf("stock + sold != initial: %s: %d + %d != %d", k, s.stock, s.sold, s.initial))
		}
	}
	check(len(cons) == 0, "stock + sold = initial for every SKU (sold = the sum of its stock_flow rows)", cons)

	// 4. The documents' scenario: exactly one of A and B, in every round.
	var scen []string
	for i, sc := range rep.Scenario {
		if (sc[0] == shop.Deducted) == (sc[1] == shop.Deducted) || !sc[0].Final() || !sc[1].Final() {
			scen = append(scen, fmt.Sprintf("scenario: round %d: A (%d) %s and B (%d) %s on %d in stock; want exactly one deducted",
				i+1, scenarioA, sc[0], scenarioB, sc[1], scenarioStock))
		}
	}
	check(len(scen) == 0, fmt.Sprintf("scenario: in each of %d rounds exactly one of A (%d) and B (%d) got the %d in stock",
		len(rep.Scenario), scenarioA, scenarioB, scenarioStock), scen)

	// 5. Every order answered, every kill made.
	open := rep.Orders[shop.Pending] + rep.Orders[shop.Undecided]
	check(open == 0 && rep.Load.Unanswered == 0 && rep.Crash.Unanswered == 0, "every order answered deducted or refused",
		[]string{fmt.Sprintf("unanswered: %d orders pending or undecided, %d load and %d crash calls without an answer", open, rep.Load.Unanswered, rep.Crash.Unanswered)})
	if h.cfg.Kills > 0 {
		check(rep.Kills == h.cfg.Kills && len(rep.Recoveries) == h.cfg.Kills,
			fmt.Sprintf("%d stock instances SIGKILLed while holding a lock, each held deduction answered after it", rep.Kills),
			[]string{fmt.Sprintf("kills: %d made, %d recovered; want %d", rep.Kills, len(rep.Recoveries), h.cfg.Kills)})
	}
	return nil
}
