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

// check reads both databases and the log and fills rep with the figures and the invariants, a
// step each, in the order the report prints them.
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
	c := &checker{h: h, rep: rep, words: h.words()}
	if err := c.read(ctx, ec, wc); err != nil {
		return err
	}
	c.checkFinished()
	if err := c.checkPrepared(ctx, ec); err != nil {
		return err
	}
	c.checkAtomicity()
	c.checkAnswers()
	c.checkTotal()
	c.checkBalances()
	c.checkScript()
	c.checkNoInternalDetail()
	c.countInDoubt()
	return nil
}

// checker is what [harness.check] read from both databases and the log, and the report it fills.
type checker struct {
	h     *harness
	rep   *Report
	words map[string]string // the log's statuses in the protocol's words

	globals    map[string]string  // gid → the log's status
	el, wl     map[string][]entry // the ledgers of east and west: gid → its rows
	east, west map[string]int64   // the balances now: account → balance
	oneSide    int                // transfers with ledger rows on one side only that no anomaly excuses
}

func (c *checker) ok(format string, args ...any) {
	c.rep.Checks = append(c.rep.Checks, fmt.Sprintf(format, args...))
}

func (c *checker) fail(format string, args ...any) {
	c.rep.Violations = append(c.rep.Violations, fmt.Sprintf(format, args...))
}

// read reads the log, both ledgers and both databases' balances.
func (c *checker) read(ctx context.Context, ec, wc *pgx.Conn) error {
	rows, err := ec.Query(ctx, `select gid, status from `+c.h.tablePrefix()+`global`)
	if err != nil {
		return err
	}
	c.globals = map[string]string{}
	var gid, st string
	if _, err := pgx.ForEachRow(rows, []any{&gid, &st}, func() error { c.globals[gid] = st; return nil }); err != nil {
		return err
	}
	if c.el, c.rep.LedgerEast, err = ledger(ctx, ec); err != nil {
		return err
	}
	if c.wl, c.rep.LedgerWest, err = ledger(ctx, wc); err != nil {
		return err
	}
	if c.east, err = accounts(ctx, ec); err != nil {
		return err
	}
	c.west, err = accounts(ctx, wc)
	return err
}

// checkFinished: every global transaction in the log committed or aborted.
func (c *checker) checkFinished() {
	c.rep.Globals = map[string]int{}
	for _, s := range c.globals {
		c.rep.Globals[c.words[s]]++
	}
	if n := len(c.globals) - c.rep.Globals["committed"] - c.rep.Globals["aborted"]; n != 0 {
		c.fail("%d global transactions neither committed nor aborted", n)
	} else {
		c.ok("no global transaction left unfinished: %d committed, %d aborted", c.rep.Globals["committed"], c.rep.Globals["aborted"])
	}
}

// checkPrepared: none of this run's prepared transactions may be left in either database.
func (c *checker) checkPrepared(ctx context.Context, ec *pgx.Conn) error {
	left := 0
	for _, db := range []string{app.East, app.West} {
		ids, err := c.h.prepared(ctx, ec, db)
		if err != nil {
			return err
		}
		left += len(ids)
	}
	if err := ec.QueryRow(ctx, `select count(*) from pg_prepared_xacts where database in ($1, $2) and starts_with(gid, 'txkit:') and not starts_with(gid, $3)`,
		app.East, app.West, c.h.preparedPrefix()).Scan(&c.rep.OtherPrepared); err != nil {
		return err
	}
	if left != 0 {
		c.fail("pg_prepared_xacts still holds %d of this run's prepared transactions in %s and %s", left, app.East, app.West)
	} else {
		c.ok("pg_prepared_xacts holds none of this run's prepared transactions in %s or %s (%d txkit ones of other runs or tests)", app.East, app.West, c.rep.OtherPrepared)
	}
	return nil
}

// ledgerCounts is what [checker.countLedgers] counts over every transfer the run knows of.
type ledgerCounts struct {
	both, neither, twice int            // ledger rows in both databases, in neither, more than one in a database
	againstLog           int            // ledger rows that disagree with the log's status, no anomaly excusing it
	wrongAmount          int            // committed transfers that moved the wrong account or amount
	stray                int            // ledger or log entries the harness never asked for
	byStatus             map[string]int // the log's status, in the protocol's words → transfers
}

// checkAtomicity: the ledger rows of each transfer are in both databases or in neither, and agree
// with the log's final status.
func (c *checker) checkAtomicity() {
	n := c.countLedgers()
	rep := c.rep
	rep.NotInLog = n.byStatus["not in the log"]
	switch {
	case n.twice+c.oneSide != 0:
		c.fail("%d transfers have ledger rows on one side only, %d more than one row in a database", c.oneSide, n.twice)
	case rep.Anomalies > 0:
		c.ok("every transfer committed on both sides or on neither, but for the textbook mode's anomalies: %d with a ledger row in each database, %d in neither, %d on one side only — all of them transfers a partition or a kill left to the agents, which committed what the coordinator aborted",
			n.both, n.neither, rep.Anomalies)
	default:
		c.ok("every transfer committed on both sides or on neither: %d with a ledger row in each database, %d in neither, none on one side", n.both, n.neither)
	}
	if n.againstLog+n.wrongAmount+n.stray != 0 {
		c.fail("%d transfers' ledger rows disagree with the log's status, %d committed ones moved the wrong account or amount, %d ledger or log entries the harness never asked for",
			n.againstLog, n.wrongAmount, n.stray)
		return
	}
	also := ""
	if rep.Anomalies+rep.AgainstLog > 0 {
		also = fmt.Sprintf(" — except the %d textbook anomalies above and %d more transfers the agents committed on both sides against the log's abort", rep.Anomalies, rep.AgainstLog)
	}
	c.ok("ledger rows match the log: committed (%d) ↔ a row in both databases with the transfer's accounts and amount; aborted (%d) and never in the log (%d) ↔ no row%s",
		n.byStatus["committed"], n.byStatus["aborted"], n.byStatus["not in the log"], also)
}

// countLedgers sorts every transfer the run knows of (in a ledger, in the log or sent) by where its
// ledger rows are, and fills the report's anomaly figures and c.oneSide.
//
// In textbook mode an agent commits a pre-committed branch that heard nothing, whatever the
// coordinator decided: for the transfers a partition trial or a kill left to the agents, a ledger
// on one side only, or ledgers against the log, are the protocol's documented anomaly (counted in
// rep.Anomalies and rep.AgainstLog). Anywhere else, and in consult-log mode and 2pc always, they
// are violations.
func (c *checker) countLedgers() ledgerCounts {
	h, rep := c.h, c.rep
	textbook := h.cfg.Protocol == "3pc" && h.cfg.Termination == "textbook"
	excused := func(g string) bool { _, ok := h.expected.Load(g); return textbook && ok }
	n := ledgerCounts{byStatus: map[string]int{}}
	rep.Anomalies, rep.AgainstLog, rep.Created, c.oneSide = 0, 0, 0, 0
	for g := range c.transfers() {
		e, w := c.el[g], c.wl[g]
		st := c.globals[g]
		n.byStatus[c.words[st]]++
		switch {
		case len(e) > 1 || len(w) > 1:
			n.twice++
		case len(e) == 1 && len(w) == 1:
			n.both++
		case len(e) == 0 && len(w) == 0:
			n.neither++
		default:
			rep.Anomalies++
			for _, x := range append(e, w...) {
				rep.Created += x.delta
			}
			if !excused(g) {
				c.oneSide++
			}
			continue
		}
		if (st == committed) != (len(e) > 0 || len(w) > 0) {
			rep.AgainstLog++
			if !excused(g) {
				n.againstLog++
			}
		}
		s, known := h.sent.Load(g)
		if !known {
			n.stray++ // a transaction the harness never asked for
			continue
		}
		t := s.(sent).t
		if st == committed && len(e) == 1 && len(w) == 1 && (e[0] != entry{t.From, -t.Amount} || w[0] != entry{t.To, t.Amount}) {
			n.wrongAmount++
		}
	}
	return n
}

// transfers returns the gid of every transfer the run knows of: in either ledger, in the log, or
// sent by the harness.
func (c *checker) transfers() map[string]bool {
	all := map[string]bool{}
	for _, m := range []map[string][]entry{c.el, c.wl} {
		for g := range m {
			all[g] = true
		}
	}
	for g := range c.globals {
		all[g] = true
	}
	c.h.sent.Range(func(k, _ any) bool { all[k.(string)] = true; return true })
	return all
}

// checkAnswers: every answer a client got agrees with the transfer's final outcome.
func (c *checker) checkAnswers() {
	wrong, answers := 0, 0
	c.h.answers.Range(func(k, v any) bool {
		answers++
		st := c.globals[k.(string)]
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
		c.fail("%d of %d answers to the client differ from the final outcome", wrong, answers)
	} else {
		c.ok("every answer a client got (%d) agrees with the final outcome", answers)
	}
}

// checkTotal: the total of both databases is conserved (but for the money the textbook mode's
// one-sided transfers created).
func (c *checker) checkTotal() {
	rep := c.rep
	rep.Initial, rep.East, rep.West = 0, 0, 0
	for _, m := range []map[string]int64{c.h.east, c.h.west} {
		for _, n := range m {
			rep.Initial += n
		}
	}
	for _, n := range c.east {
		rep.East += n
	}
	for _, n := range c.west {
		rep.West += n
	}
	rep.Final = rep.East + rep.West
	switch {
	case rep.Anomalies > 0 && c.oneSide == 0 && rep.Final == rep.Initial+rep.Created:
		c.ok("total balance: initial %d %+d moved by the %d one-sided transfers of the textbook mode = %d = east %d + west %d (money is conserved but for them)",
			rep.Initial, rep.Created, rep.Anomalies, rep.Final, rep.East, rep.West)
	case rep.Final != rep.Initial:
		c.fail("money not conserved: %d at the start, %d now (east %d + west %d)", rep.Initial, rep.Final, rep.East, rep.West)
	default:
		c.ok("total balance conserved: %d = east %d + west %d", rep.Initial, rep.East, rep.West)
	}
}

// checkBalances: each balance is its seed plus its ledger rows (no money moved without a ledger
// row, none with one that was rolled back).
func (c *checker) checkBalances() {
	off := 0
	for _, side := range []struct {
		seed, now map[string]int64
		l         map[string][]entry
	}{{c.h.east, c.east, c.el}, {c.h.west, c.west, c.wl}} {
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
		c.fail("%d balances differ from their seed plus their ledger rows", off)
	} else {
		c.ok("every balance (%d accounts in each database) is its seed plus its ledger rows", len(c.east))
	}
}

// checkScript: each of the script's transfers got the answer it should, and its accounts hold what
// they should.
func (c *checker) checkScript() {
	want := map[string]map[string]int64{"east": maps.Clone(scriptEast), "west": maps.Clone(scriptWest)}
	bad := 0
	for _, s := range c.rep.Script {
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
			if c.rep.After[db][id] != n {
				bad++
			}
		}
	}
	if bad != 0 {
		c.fail("the script's transfers: %d answers or balances differ from what they should be", bad)
	} else {
		c.ok("the script's %d transfers got the answers they should and left the balances they should", len(c.rep.Script))
	}
}

// checkNoInternalDetail: no answer carries internal detail; the bank logs it and answers a short
// message.
func (c *checker) checkNoInternalDetail() {
	var leaks []string
	withError := 0
	c.h.errs.Range(func(k, v any) bool {
		withError++
		if d := c.h.internalDetail(v.(string)); d != "" {
			leaks = append(leaks, fmt.Sprintf("%s (%q in %q)", k, d, v))
		}
		return true
	})
	if len(leaks) > 0 {
		slices.Sort(leaks)
		c.fail("%d answers carry internal detail, e.g. %s", len(leaks), leaks[0])
	} else {
		c.ok("no answer carries internal detail (%d answers with an error message)", withError)
	}
}

// countInDoubt counts the final log status of the transactions the drill left in doubt.
func (c *checker) countInDoubt() {
	if len(c.rep.doubted) == 0 {
		return
	}
	c.rep.InDoubtEnd = map[string]int{}
	for _, g := range c.rep.doubted {
		c.rep.InDoubtEnd[c.words[c.globals[g]]]++
	}
}
