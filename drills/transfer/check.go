package main

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/transfer/app"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

// The log keeps the coordinator core's status names (the same for twopc and threepc); the report
// uses the protocol's words.
var (
	committed = twopc.StatusCommitted.String()
	aborted   = twopc.StatusAborted.String()
	words2PC  = map[string]string{
		twopc.StatusPreparing.String(): "preparing", twopc.StatusCommitting.String(): "committing", committed: "committed",
		twopc.StatusAborting.String(): "aborting", aborted: "aborted", "": "not in the log",
	}
	words3PC = map[string]string{
		threepc.StatusPreCommitting.String(): "precommitting", threepc.StatusCommitting.String(): "committing",
		threepc.StatusCommitted.String(): "committed", threepc.StatusAborting.String(): "aborting",
		threepc.StatusAborted.String(): "aborted", "": "not in the log",
	}
)

// words returns the run's protocol's words for the log's statuses.
func (h *harness) words() map[string]string {
	if h.cfg.Protocol == "3pc" {
		return words3PC
	}
	return words2PC
}

func accounts(ctx context.Context, c *pgx.Conn) (map[string]int64, error) {
	rows, err := c.Query(ctx, `select id, balance from accounts`)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var id string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil })
	return out, err
}

type entry struct {
	account string
	delta   int64
}

// ledger reads a database's ledger: gid → its rows.
func ledger(ctx context.Context, c *pgx.Conn) (map[string][]entry, int, error) {
	rows, err := c.Query(ctx, `select gid, account, delta from ledger`)
	if err != nil {
		return nil, 0, err
	}
	out := map[string][]entry{}
	var gid string
	var e entry
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&gid, &e.account, &e.delta}, func() error {
		out[gid] = append(out[gid], e)
		n++
		return nil
	})
	return out, n, err
}

// check reads both databases and the log and fills rep with the figures and the invariants.
// internalDetail returns what in msg, an answer's error message, is the bank's internal detail
// (the text of twopc's or the driver's errors, the databases, the run's schema, the server's
// address), or "".
func (h *harness) internalDetail(msg string) string {
	var host string
	if u, err := url.Parse(h.cfg.PG); err == nil {
		host = u.Host
	}
	for _, d := range []string{"twopc:", "threepc:", "SQLSTATE", "ERROR:", "FATAL:", "failed to connect", app.East, app.West, h.schema, host} {
		if d != "" && strings.Contains(msg, d) {
			return d
		}
	}
	return ""
}

func (h *harness) check(ctx context.Context, rep *Report) error {
	ec, err := exapp.Connect(ctx, h.cfg.PG, app.East, h.schema)
	if err != nil {
		return err
	}
	defer ec.Close(context.WithoutCancel(ctx))
	wc, err := exapp.Connect(ctx, h.cfg.PG, app.West, h.schema)
	if err != nil {
		return err
	}
	defer wc.Close(context.WithoutCancel(ctx))
	fail := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	ok := func(format string, args ...any) { rep.Checks = append(rep.Checks, fmt.Sprintf(format, args...)) }

	// The log.
	globals := map[string]string{}
	words := h.words()
	rows, err := ec.Query(ctx, `select gid, status from `+h.tablePrefix()+`global`)
	if err != nil {
		return err
	}
	var gid, st string
	if _, err := pgx.ForEachRow(rows, []any{&gid, &st}, func() error { globals[gid] = st; return nil }); err != nil {
		return err
	}
	rep.Globals = map[string]int{}
	for _, s := range globals {
		rep.Globals[words[s]]++
	}
	if n := len(globals) - rep.Globals["committed"] - rep.Globals["aborted"]; n != 0 {
		fail("%d global transactions neither committed nor aborted", n)
	} else {
		ok("no global transaction left unfinished: %d committed, %d aborted", rep.Globals["committed"], rep.Globals["aborted"])
	}

	// Prepared transactions: none of this run's may be left in either database.
	left := 0
	for _, db := range []string{app.East, app.West} {
		ids, err := h.prepared(ctx, ec, db)
		if err != nil {
			return err
		}
		left += len(ids)
	}
	if err := ec.QueryRow(ctx, `select count(*) from pg_prepared_xacts where database in ($1, $2) and starts_with(gid, 'txkit:') and not starts_with(gid, $3)`,
		app.East, app.West, h.preparedPrefix()).Scan(&rep.OtherPrepared); err != nil {
		return err
	}
	if left != 0 {
		fail("pg_prepared_xacts still holds %d of this run's prepared transactions in %s and %s", left, app.East, app.West)
	} else {
		ok("pg_prepared_xacts holds none of this run's prepared transactions in %s or %s (%d txkit ones of other runs or tests)", app.East, app.West, rep.OtherPrepared)
	}

	// Atomicity: the ledger rows of each transfer are in both databases or in neither, and agree
	// with the log's final status.
	el, ne, err := ledger(ctx, ec)
	if err != nil {
		return err
	}
	wl, nw, err := ledger(ctx, wc)
	if err != nil {
		return err
	}
	rep.LedgerEast, rep.LedgerWest = ne, nw
	all := map[string]bool{}
	for _, m := range []map[string][]entry{el, wl} {
		for g := range m {
			all[g] = true
		}
	}
	for g := range globals {
		all[g] = true
	}
	h.sent.Range(func(k, _ any) bool { all[k.(string)] = true; return true })
	// In textbook mode an agent commits a pre-committed branch that heard nothing, whatever the
	// coordinator decided: for the transfers a partition trial or a kill left to the agents, a
	// ledger on one side only, or ledgers against the log, are the protocol's documented anomaly
	// (counted in rep.Anomalies and rep.AgainstLog). Anywhere else, and in consult-log mode and
	// 2pc always, they are violations.
	textbook := h.cfg.Protocol == "3pc" && h.cfg.Termination == "textbook"
	excused := func(g string) bool { _, ok := h.expected.Load(g); return textbook && ok }
	var both, neither, oneSide, twice, againstLog, wrongAmount, stray, byStatus = 0, 0, 0, 0, 0, 0, 0, map[string]int{}
	rep.Anomalies, rep.AgainstLog, rep.Created = 0, 0, 0
	for g := range all {
		e, w := el[g], wl[g]
		st := globals[g]
		byStatus[words[st]]++
		switch {
		case len(e) > 1 || len(w) > 1:
			twice++
		case len(e) == 1 && len(w) == 1:
			both++
		case len(e) == 0 && len(w) == 0:
			neither++
		default:
			rep.Anomalies++
			for _, x := range append(e, w...) {
				rep.Created += x.delta
			}
			if !excused(g) {
				oneSide++
			}
			continue
		}
		if (st == committed) != (len(e) > 0 || len(w) > 0) {
			rep.AgainstLog++
			if !excused(g) {
				againstLog++
			}
		}
		s, known := h.sent.Load(g)
		if !known {
			stray++ // a transaction the harness never asked for
			continue
		}
		t := s.(sent).t
		if st == committed && len(e) == 1 && len(w) == 1 && (e[0] != entry{t.From, -t.Amount} || w[0] != entry{t.To, t.Amount}) {
			wrongAmount++
		}
	}
	rep.NotInLog = byStatus["not in the log"]
	switch {
	case twice+oneSide != 0:
		fail("%d transfers have ledger rows on one side only, %d more than one row in a database", oneSide, twice)
	case rep.Anomalies > 0:
		ok("every transfer committed on both sides or on neither, but for the textbook mode's anomalies: %d with a ledger row in each database, %d in neither, %d on one side only — all of them transfers a partition or a kill left to the agents, which committed what the coordinator aborted",
			both, neither, rep.Anomalies)
	default:
		ok("every transfer committed on both sides or on neither: %d with a ledger row in each database, %d in neither, none on one side", both, neither)
	}
	if againstLog+wrongAmount+stray != 0 {
		fail("%d transfers' ledger rows disagree with the log's status, %d committed ones moved the wrong account or amount, %d ledger or log entries the harness never asked for",
			againstLog, wrongAmount, stray)
	} else {
		also := ""
		if rep.Anomalies+rep.AgainstLog > 0 {
			also = fmt.Sprintf(" — except the %d textbook anomalies above and %d more transfers the agents committed on both sides against the log's abort", rep.Anomalies, rep.AgainstLog)
		}
		ok("ledger rows match the log: committed (%d) ↔ a row in both databases with the transfer's accounts and amount; aborted (%d) and never in the log (%d) ↔ no row%s",
			byStatus["committed"], byStatus["aborted"], byStatus["not in the log"], also)
	}

	// The answers clients got.
	wrong, answers := 0, 0
	h.answers.Range(func(k, v any) bool {
		answers++
		st := globals[k.(string)]
		switch v.(string) {
		case "committed":
			if st != committed {
				wrong++
			}
		case "refused", "rejected", "aborted":
			if st == committed {
				wrong++
			}
		}
		return true
	})
	if wrong != 0 {
		fail("%d of %d answers to the client differ from the final outcome", wrong, answers)
	} else {
		ok("every answer a client got (%d) agrees with the final outcome", answers)
	}

	// Money: the total of both databases is conserved, and each balance is its seed plus its
	// ledger rows (no money moved without a ledger row, none with one that was rolled back).
	east, err := accounts(ctx, ec)
	if err != nil {
		return err
	}
	west, err := accounts(ctx, wc)
	if err != nil {
		return err
	}
	rep.Initial, rep.East, rep.West = 0, 0, 0
	for _, m := range []map[string]int64{h.east, h.west} {
		for _, n := range m {
			rep.Initial += n
		}
	}
	for _, n := range east {
		rep.East += n
	}
	for _, n := range west {
		rep.West += n
	}
	rep.Final = rep.East + rep.West
	switch {
	case rep.Anomalies > 0 && oneSide == 0 && rep.Final == rep.Initial+rep.Created:
		ok("total balance: initial %d %+d moved by the %d one-sided transfers of the textbook mode = %d = east %d + west %d (money is conserved but for them)",
			rep.Initial, rep.Created, rep.Anomalies, rep.Final, rep.East, rep.West)
	case rep.Final != rep.Initial:
		fail("money not conserved: %d at the start, %d now (east %d + west %d)", rep.Initial, rep.Final, rep.East, rep.West)
	default:
		ok("total balance conserved: %d = east %d + west %d", rep.Initial, rep.East, rep.West)
	}
	off := 0
	for _, side := range []struct {
		seed, now map[string]int64
		l         map[string][]entry
	}{{h.east, east, el}, {h.west, west, wl}} {
		want := maps.Clone(side.seed)
		for _, es := range side.l {
			for _, e := range es {
				want[e.account] += e.delta
			}
		}
		for id, n := range want {
			if side.now[id] != n {
				off++
			}
		}
	}
	if off != 0 {
		fail("%d balances differ from their seed plus their ledger rows", off)
	} else {
		ok("every balance (%d accounts in each database) is its seed plus its ledger rows", len(east))
	}

	// The script: each transfer got the answer it should, and its accounts hold what they should.
	want := map[string]map[string]int64{"east": maps.Clone(scriptEast), "west": maps.Clone(scriptWest)}
	bad := 0
	for _, s := range rep.Script {
		if s.Got != s.Want {
			bad++
		}
		if s.Want == "committed" {
			want["east"][s.From] -= s.Amount
			want["west"][s.To] += s.Amount
		}
	}
	for db, m := range want {
		for id, n := range m {
			if rep.After[db][id] != n {
				bad++
			}
		}
	}
	if bad != 0 {
		fail("the script's transfers: %d answers or balances differ from what they should be", bad)
	} else {
		ok("the script's %d transfers got the answers they should and left the balances they should", len(rep.Script))
	}

	// No answer carries internal detail: the bank logs it and answers a short message.
	var leaks []string
	withError := 0
	h.errs.Range(func(k, v any) bool {
		withError++
		if d := h.internalDetail(v.(string)); d != "" {
			leaks = append(leaks, fmt.Sprintf("%s (%q in %q)", k, d, v))
		}
		return true
	})
	if len(leaks) > 0 {
		slices.Sort(leaks)
		fail("%d answers carry internal detail, e.g. %s", len(leaks), leaks[0])
	} else {
		ok("no answer carries internal detail (%d answers with an error message)", withError)
	}

	if len(rep.doubted) > 0 {
		rep.InDoubtEnd = map[string]int{}
		for _, g := range rep.doubted {
			rep.InDoubtEnd[words[globals[g]]]++
		}
	}
	return nil
}
