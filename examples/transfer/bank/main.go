// Command bank is the transfer example's coordinator service. POST /transfers {"from", "to",
// "amount"} moves money between two PostgreSQL databases in one two-phase commit (twopc): it
// debits "from" in txkit_east and credits "to" in txkit_west, each in a database transaction
// enlisted with Global.Enlist that also writes a ledger row (gid, account, delta), then commits —
// PREPARE TRANSACTION in both, the decision in the log, COMMIT PREPARED in both. A debit that
// would take the balance below zero fails the table's CHECK, so the transfer is aborted and
// answered 409; an unknown account is aborted and answered 404.
//
// Run several instances on one schema: each serves transfers, and the one elected in ZooKeeper
// recovers what a dead instance left between the phases: it ends every prepared transaction left
// in the two databases as the log says — COMMIT PREPARED when the transfer's decision to commit
// is in the log, ROLLBACK PREPARED when it is not (presumed abort: twopc writes nothing for a
// database-only transaction before its decision) once -resolve-grace has passed. -pause-rate and
// -pause make some commits sleep between the phases, so that a drill's SIGKILL lands there.
//
// With -protocol 3pc the same transfer is a three-phase commit (threepc): CanCommit asks both
// databases read-only whether the accounts exist and east's balance covers the amount (a "no" is
// answered at once, nothing executed or logged), the transaction is recorded, PreCommit runs each
// side's move and PREPARE TRANSACTION, then the decision and COMMIT PREPARED (DoCommit). Run an
// examples/transfer/agent beside each database, with -timeout equal to -participant-timeout: it
// ends the prepared transactions a dead or cut-off coordinator left. -west-addr makes the
// coordinator's txkit_west pools connect through another address (the demo's partition proxy).
//
//	go run ./examples/transfer/bank -schema demo -id bank-1 -seed-east alice=100 -seed-west bob=0
//	go run ./examples/transfer/bank -protocol 3pc -schema demo3 -id bank-1 -seed-east alice=100 -seed-west bob=0
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/transfer/app"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

type config struct {
	listen, pg, schema, zk, id, election, recovery, resolve, seedEast, seedWest, pauseAt, protocol, westAddr string
	timeout, prepareTimeout, lease, callTimeout, sessionTimeout, resolveGrace, pause                         time.Duration
	canCommitTimeout, preCommitTimeout, participantTimeout                                                   time.Duration
	pauseRate                                                                                                float64
	maxConns                                                                                                 int
	votes                                                                                                    bool
}

func main() {
	var c config
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "HTTP address")
	flag.StringVar(&c.pg, "pg", exapp.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (its database is replaced by "+app.East+" and "+app.West+", created if missing)")
	flag.StringVar(&c.schema, "schema", "transfer", "schema of this run, in both databases; the coordinators' log lives in "+app.East+"'s")
	flag.StringVar(&c.zk, "zk", exapp.Env("TXKIT_ZK", app.DefaultZK), "ZooKeeper servers")
	flag.StringVar(&c.id, "id", "bank-"+uuid.NewString()[:8], "instance id (its id in the recovery election)")
	flag.StringVar(&c.election, "election", "", "ZooKeeper path of the recovery election (default /txkit-demo/<schema>/<protocol>)")
	flag.StringVar(&c.protocol, "protocol", "2pc", "2pc (twopc: PREPARE, decision, COMMIT PREPARED) or 3pc (threepc: CanCommit, PreCommit = the work + PREPARE, decision, DoCommit; run examples/transfer/agent beside each database)")
	flag.StringVar(&c.westAddr, "west-addr", "", "host:port the coordinator's "+app.West+" pools connect to instead of -pg's (a drill's partition proxy)")
	flag.StringVar(&c.seedEast, "seed-east", "", "accounts in "+app.East+", id=balance,... (inserted only when the account is new)")
	flag.StringVar(&c.seedWest, "seed-west", "", "accounts in "+app.West+", id=balance,...")
	flag.DurationVar(&c.timeout, "timeout", 6*time.Second, "global timeout of a transaction (above -prepare-timeout; with 3pc above -participant-timeout)")
	flag.DurationVar(&c.prepareTimeout, "prepare-timeout", 3*time.Second, "2pc: bound of phase one (below -timeout)")
	flag.DurationVar(&c.canCommitTimeout, "cancommit-timeout", 500*time.Millisecond, "3pc: bound of the CanCommit phase")
	flag.DurationVar(&c.preCommitTimeout, "precommit-timeout", 2*time.Second, "3pc: bound of the PreCommit phase (the work and PREPARE TRANSACTION)")
	flag.DurationVar(&c.participantTimeout, "participant-timeout", 3*time.Second, "3pc: the agents' timeout (what examples/transfer/agent runs with); above -cancommit-timeout plus -precommit-timeout, below -timeout")
	flag.DurationVar(&c.lease, "lease", 3*time.Second, "how long a starter owns a decided transaction before the leader may finish it")
	flag.DurationVar(&c.callTimeout, "call-timeout", 2*time.Second, "bound of each COMMIT/ROLLBACK PREPARED")
	flag.DurationVar(&c.sessionTimeout, "session-timeout", 4*time.Second, "ZooKeeper session timeout (how long a dead leader keeps its leadership)")
	flag.StringVar(&c.recovery, "recovery", "@every 500ms", "cron spec of the leader's recovery pass")
	flag.StringVar(&c.resolve, "resolve", "@every 1s", "cron spec of the leader's scan of pg_prepared_xacts")
	flag.DurationVar(&c.resolveGrace, "resolve-grace", 5*time.Second, "age below which a prepared transaction is left to its starter; keep it above -prepare-timeout plus -pause, or slow commits are aborted")
	flag.Float64Var(&c.pauseRate, "pause-rate", 0, "fraction of commits that sleep -pause between the phases (for drills)")
	flag.DurationVar(&c.pause, "pause", time.Second, "the sleep of a paused commit")
	flag.StringVar(&c.pauseAt, "pause-at", "both", "where a paused commit sleeps: prepared (2pc) or precommitted (3pc), before the decision; decided, after it; or both (either, at random)")
	flag.IntVar(&c.maxConns, "max-conns", 16, "connections per database pool")
	flag.BoolVar(&c.votes, "votes", true, "2pc: commit with vote markers (twopc.WithVoteMarkers, the default): the transfer is recorded while its branches prepare, and commits once both voted yes; -votes=false writes the decision between the phases")
	flag.Parse()
	log := exapp.Logger("bank").With("id", c.id)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("bank service failed", "err", err)
		os.Exit(1)
	}
}

type service struct {
	c     config
	log   *slog.Logger
	el    lock.Elector
	tpc   *twopc.Coordinator   // -protocol 2pc
	three *threepc.Coordinator // -protocol 3pc
	east  *pgxpool.Pool
	west  *pgxpool.Pool
}

// coordinatorRun is what run needs of either coordinator.
type coordinatorRun interface {
	Run(ctx context.Context) error
	Flush(ctx context.Context) error
	Close() error
	RegisterDB(name string, pool *pgxpool.Pool) error
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	if c.protocol != "2pc" && c.protocol != "3pc" {
		return fmt.Errorf("-protocol %q: want 2pc or 3pc", c.protocol)
	}
	hook, err := pauseHook(c.protocol, c.pauseRate, c.pause, c.pauseAt, log)
	if err != nil {
		return err
	}
	if hook != nil && !drillBuild {
		return fmt.Errorf("-pause-rate %v: pausing between the phases is for the drills' build of the bank (go build -tags drill)", c.pauseRate)
	}
	seeds := map[string]map[string]int64{}
	for db, s := range map[string]string{app.East: c.seedEast, app.West: c.seedWest} {
		if seeds[db], err = parseSeed(s); err != nil {
			return err
		}
	}
	westBase := c.pg
	if c.westAddr != "" {
		if westBase, err = withHost(c.pg, c.westAddr); err != nil {
			return err
		}
	}
	// The log has a pool of its own: a transfer holds an east connection (its enlisted
	// transaction) while Commit writes the log, so sharing one pool could starve it.
	logPool, err := exapp.Pool(ctx, c.pg, app.East, c.schema, c.maxConns)
	if err != nil {
		return err
	}
	defer logPool.Close()
	east, err := exapp.Pool(ctx, c.pg, app.East, c.schema, c.maxConns)
	if err != nil {
		return err
	}
	defer east.Close()
	west, err := exapp.Pool(ctx, westBase, app.West, c.schema, c.maxConns)
	if err != nil {
		return err
	}
	defer west.Close()
	for db, pool := range map[string]*pgxpool.Pool{app.East: east, app.West: west} {
		if err := migrate(ctx, pool, c.schema, seeds[db]); err != nil {
			return fmt.Errorf("%s: %w", db, err)
		}
	}
	mux := http.NewServeMux()
	reg := exapp.Metrics(mux)
	auth, err := exapp.ZKAuth() // TXKIT_ZK_AUTH
	if err != nil {
		return err
	}
	sess, err := zklock.NewSession(ctx, strings.Split(c.zk, ","), zklock.WithSessionTimeout(c.sessionTimeout), zklock.WithLogger(log), auth)
	if err != nil {
		return err
	}
	defer sess.Close()
	election := c.election
	if election == "" {
		election = "/txkit-demo/" + c.schema + "/" + c.protocol
	}
	el, err := zklock.NewElector(sess, election, c.id, lock.WithElectionRegisterer(reg))
	if err != nil {
		return err
	}
	opts := []coordinator.Option{coordinator.WithSchema(c.schema), coordinator.WithElector(el), coordinator.WithLogger(log),
		coordinator.WithDefaultTimeout(c.timeout), coordinator.WithLease(c.lease),
		coordinator.WithRetry(c.callTimeout, 200*time.Millisecond, 2*time.Second),
		coordinator.WithRecovery(c.recovery, 100, 16), coordinator.WithTelemetry(reg, nil)}
	s := &service{c: c, log: log, el: el, east: east, west: west}
	var coord coordinatorRun
	if c.protocol == "3pc" {
		s.three, err = newThreePC(ctx, c, logPool, hook, opts)
		coord = s.three
	} else {
		s.tpc, err = newTwoPC(ctx, c, logPool, hook, opts)
		coord = s.tpc
	}
	if err != nil {
		return err
	}
	defer coord.Close() // after Run has returned (the errgroup below)
	// Every instance registers the same names for the same databases: the branches store the
	// names, and the leader that recovers a transaction resolves them in its own process.
	if err := coord.RegisterDB("east", east); err != nil {
		return err
	}
	if err := coord.RegisterDB("west", west); err != nil {
		return err
	}
	mux.HandleFunc("POST /transfers", s.transfer)
	mux.HandleFunc("GET /transfers/{gid}", s.get)
	mux.HandleFunc("GET /stats", s.stats)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		exapp.WriteJSON(w, 200, map[string]string{"status": "ok"})
	})
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return coord.Run(gctx) })
	g.Go(func() error { return exapp.Serve(gctx, c.listen, mux) })
	log.Info("bank service running", "protocol", c.protocol, "schema", c.schema, "election", election, "west", c.westAddr,
		"pause_rate", c.pauseRate, "pause", c.pause, "pause_at", c.pauseAt)
	err = g.Wait()
	// The outcomes the coordinator wrote in the background (deferred finish) land before exit.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return errors.Join(err, coord.Flush(fctx))
}

// newTwoPC builds the 2pc coordinator on the log's pool and migrates its tables.
func newTwoPC(ctx context.Context, c config, logPool *pgxpool.Pool, hook phaseHook, opts []coordinator.Option) (*twopc.Coordinator, error) {
	opts = append(opts, twopc.WithPrepareTimeout(c.prepareTimeout), twopc.WithInDoubtResolution(c.resolve, c.resolveGrace))
	opts = append(opts, twopc.WithVoteMarkers(c.votes))
	if hook != nil {
		opts = append(opts, phaseOption(hook))
	}
	return migrated(ctx, twopc.New, logPool, opts)
}

// migrated returns the coordinator newFn (twopc.New, threepc.New) builds on logPool with opts,
// its tables migrated; a failed migration closes it.
func migrated[C interface {
	Migrate(context.Context) error
	Close() error
}](ctx context.Context, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error), logPool *pgxpool.Pool, opts []coordinator.Option) (C, error) {
	var none C
	coord, err := newFn(logPool, opts...)
	if err != nil {
		return none, err
	}
	if err := coord.Migrate(ctx); err != nil {
		_ = coord.Close()
		return none, err
	}
	return coord, nil
}

// withHost returns the PostgreSQL URL base with its host and port replaced by addr.
func withHost(base, addr string) (string, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("-west-addr %q: want host:port", addr)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("-pg: %w", err)
	}
	u.Host = addr
	return u.String(), nil
}

// migrate creates the accounts and ledger tables in the run's schema and inserts the seed's new
// accounts. Instances starting together serialise on an advisory lock.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string, seed map[string]int64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('txkit/examples/transfer:' || $1))`, schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			create table if not exists accounts (id text primary key, balance bigint not null check (balance >= 0));
			create table if not exists ledger (
				gid text not null, account text not null, delta bigint not null,
				at timestamptz not null default clock_timestamp())`); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
		for id, n := range seed {
			// Not "on conflict do nothing": that waits for a prepared transaction holding the
			// account's row, so an instance restarted during a drill would hang until it ends.
			if _, err := tx.Exec(ctx, `insert into accounts (id, balance) select $1, $2 where not exists (select from accounts where id = $1)`, id, n); err != nil {
				return fmt.Errorf("seed %s: %w", id, err)
			}
		}
		return nil
	})
}

// parseSeed reads "id=n,id=n".
func parseSeed(s string) (map[string]int64, error) {
	out := map[string]int64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		var n int64
		if _, err := fmt.Sscan(v, &n); !ok || k == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("seed %q: want id=balance", kv)
		}
		out[k] = n
	}
	return out, nil
}

// phaseHook is the pause hook of either protocol, the phase given by its name.
type phaseHook func(ctx context.Context, gid, phase string) error

// pauseHook returns the hook that makes a fraction rate of the commits sleep d at phase at: with
// 2pc "prepared" (every branch is prepared, the decision not yet written), with 3pc
// "precommitted" (every branch pre-committed: prepared in its database, the decision not yet
// written); "decided" (written, the last phase not begun); "both": either, with rate/2 each. It
// returns nil when rate is 0.
func pauseHook(protocol string, rate float64, d time.Duration, at string, log *slog.Logger) (phaseHook, error) {
	if rate < 0 || rate > 1 || d < 0 {
		return nil, fmt.Errorf("-pause-rate %v (want 0..1), -pause %v", rate, d)
	}
	before := "prepared"
	if protocol == "3pc" {
		before = "precommitted"
	}
	switch at {
	case before, "decided":
	case "both":
		rate /= 2
	default:
		return nil, fmt.Errorf("-pause-at %q: want %s, decided or both", at, before)
	}
	if rate == 0 {
		return nil, nil
	}
	return func(ctx context.Context, gid, phase string) error {
		if (phase != before && phase != "decided") || (at != "both" && at != phase) || rand.Float64() >= rate {
			return nil
		}
		log.Info("pausing between the phases", "gid", gid, "phase", phase, "for", d)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		return nil
	}, nil
}

// errNoAccount: the account named in a transfer does not exist in its database.
var errNoAccount = errors.New("no such account")

// move returns the work of one side of a transfer: add delta to account's balance and write the
// ledger row, in the branch's transaction. A debit below zero fails the CHECK (SQLSTATE 23514).
func move(gid, account string, delta int64) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update accounts set balance = balance + $2 where id = $1`, account, delta)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%s: %w", account, errNoAccount)
		}
		_, err = tx.Exec(ctx, `insert into ledger (gid, account, delta) values ($1, $2, $3)`, gid, account, delta)
		return err
	}
}

func insufficientFunds(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" // check_violation: balance >= 0
}

// transfer: POST /transfers → 200 committed; 409 refused (insufficient funds) or aborted (phase
// one failed); 404 rejected (no such account); 400 for a bad body or gid; 503 aborted when a
// side's work failed otherwise; 500 unknown when this instance does not know the outcome (the
// leader settles it). A 4xx answer describes only the request; anything else this side did wrong
// is logged with a request id, and the answer carries a short message and that id, never the
// error's text (driver messages name the database, its user and host).
func (s *service) transfer(w http.ResponseWriter, r *http.Request) {
	var t app.Transfer
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&t); err != nil || t.From == "" || t.To == "" || t.Amount <= 0 || len(t.GID) > 64 {
		exapp.WriteJSON(w, http.StatusBadRequest, app.Answer{Status: "rejected", Error: `want {"from", "to", "amount" > 0, optional "gid" of at most 64 bytes}`})
		return
	}
	// The transfer outlives a client that hangs up: its branches may already be prepared.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.c.timeout+s.c.pause+s.c.callTimeout)
	defer cancel()
	var bopts []coordinator.BeginOption
	if t.GID != "" {
		bopts = append(bopts, coordinator.WithGID(t.GID))
	}
	if s.three != nil {
		s.transfer3PC(ctx, w, t, bopts)
		return
	}
	g, err := s.tpc.Begin(ctx, bopts...)
	if s.beginFailed(w, t, err) {
		return
	}
	gid := g.GID()
	// East before west, in every transfer: the row locks are taken in the same order, so transfers
	// cannot wait for each other in a cycle across the databases (a deadlock PostgreSQL could not
	// detect, each database seeing only half of it).
	account := t.From
	err = g.Enlist(ctx, "east", move(gid, t.From, -t.Amount))
	if err == nil {
		account = t.To
		err = g.Enlist(ctx, "west", move(gid, t.To, t.Amount))
	}
	if err != nil {
		if aerr := g.Abort(ctx); aerr != nil {
			s.log.Warn("abort failed", "gid", gid, "err", aerr)
		}
		switch {
		case insufficientFunds(err):
			exapp.WriteJSON(w, http.StatusConflict, app.Answer{GID: gid, Status: "refused", Error: "insufficient funds in " + t.From})
		case errors.Is(err, errNoAccount):
			exapp.WriteJSON(w, http.StatusNotFound, app.Answer{GID: gid, Status: "rejected", Error: "no such account: " + account})
		default: // rolled back everywhere, nothing in the log: safe to try again
			s.fail(w, http.StatusServiceUnavailable, app.Answer{GID: gid, Status: "aborted"}, "the transfer failed and was rolled back; try again", err)
		}
		return
	}
	switch err := g.Commit(ctx); {
	case err == nil:
		exapp.WriteJSON(w, http.StatusOK, app.Answer{GID: gid, Status: "committed"})
	case errors.Is(err, twopc.ErrAborted):
		// Phase one failed (a database did not prepare in time): nothing about the request, so
		// the reason is logged, not answered.
		s.fail(w, http.StatusConflict, app.Answer{GID: gid, Status: "aborted"}, "a database could not prepare the transfer; it was rolled back", err)
	case errors.Is(err, coordinator.ErrIncomplete):
		// Decided to commit; the leader finishes the COMMIT PREPARED that failed.
		exapp.WriteJSON(w, http.StatusOK, app.Answer{GID: gid, Status: "committed"})
	default: // ErrInDoubt and the like: the leader settles it
		s.fail(w, http.StatusInternalServerError, app.Answer{GID: gid, Status: "unknown"}, "outcome not known yet; the recovery settles it (GET /transfers/{gid})", err)
	}
}

// beginFailed answers the failure of Begin, when err is one, and reports whether it was.
func (s *service) beginFailed(w http.ResponseWriter, t app.Transfer, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, coordinator.ErrInvalidOption): // the gid
		exapp.WriteJSON(w, http.StatusBadRequest, app.Answer{Status: "rejected", Error: `"gid" must be UTF-8 without backslash or control characters`})
	default:
		s.fail(w, http.StatusServiceUnavailable, app.Answer{GID: t.GID, Status: "aborted"}, "could not begin the transfer; try again", err)
	}
	return true
}

// fail answers a with code and the short message msg: err goes only to the log, under a new
// request id that the answer carries (as exapp.Fail does, in the transfer's own answer, so that
// clients still get its gid and status).
func (s *service) fail(w http.ResponseWriter, code int, a app.Answer, msg string, err error) {
	a.Error, a.RequestID = msg, exapp.LogError(s.log, msg, err, "gid", a.GID)
	exapp.WriteJSON(w, code, a)
}

// words names the log's statuses (the coordinator core's) in two-phase-commit terms, words3PC
// in three-phase-commit terms.
var (
	words = map[coordinator.Status]string{twopc.StatusPreparing: "preparing", twopc.StatusVoting: "voting", twopc.StatusCommitting: "committing",
		twopc.StatusCommitted: "committed", twopc.StatusAborting: "aborting", twopc.StatusAborted: "aborted"}
	words3PC = map[coordinator.Status]string{threepc.StatusPreCommitting: "precommitting", threepc.StatusCommitting: "committing",
		threepc.StatusCommitted: "committed", threepc.StatusAborting: "aborting", threepc.StatusAborted: "aborted"}
)

// status returns gid's status in the log, in the protocol's words.
func (s *service) status(ctx context.Context, gid string) (string, error) {
	if s.three != nil {
		st, err := s.three.Status(ctx, gid)
		return words3PC[st], err
	}
	st, err := s.tpc.Status(ctx, gid)
	return words[st], err
}

// get: GET /transfers/{gid} → the transaction's status in the log and the sum of its ledger rows
// in each database (null: none).
func (s *service) get(w http.ResponseWriter, r *http.Request) {
	gid := r.PathValue("gid")
	out := map[string]any{"gid": gid}
	st, err := s.status(r.Context(), gid)
	switch {
	case errors.Is(err, coordinator.ErrNotFound):
		out["transaction"] = "not in the log: it never decided to commit (presumed abort)"
		if s.three != nil {
			out["transaction"] = "not in the log: aborted before any PreCommit (presumed abort)"
		}
	case err != nil:
		exapp.Fail(w, s.log, http.StatusInternalServerError, "could not read the transaction's status", err, "gid", gid)
		return
	default:
		out["transaction"] = st
	}
	for name, pool := range map[string]*pgxpool.Pool{"east": s.east, "west": s.west} {
		var delta *int64
		err := pool.QueryRow(r.Context(), `select sum(delta) from ledger where gid = $1`, gid).Scan(&delta)
		if err != nil {
			exapp.Fail(w, s.log, http.StatusInternalServerError, "could not read the ledger of "+name, err, "gid", gid)
			return
		}
		out[name] = delta
	}
	exapp.WriteJSON(w, http.StatusOK, out)
}

// stats: GET /stats → who leads the recovery election, and the coordinator's counters.
func (s *service) stats(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"id": s.c.id, "protocol": s.c.protocol}
	if s.three != nil {
		out["threepc"] = s.three.Stats()
	} else {
		out["twopc"] = s.tpc.Stats()
	}
	leader, err := s.el.Leader(r.Context())
	if err != nil && !errors.Is(err, lock.ErrNoLeader) {
		out["leader_error"] = "unavailable (request id " + exapp.LogError(s.log, "read the election's leader", err) + ")"
	}
	out["leader"] = leader
	exapp.WriteJSON(w, http.StatusOK, out)
}
