package concbench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/bench/cpustat"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/rocketmq"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/twopc"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

const (
	maxClients = 64
	poolConns  = 32 // every pool of a recipe: what a service sized for 64 clients would configure
	secret     = "bench-secret-0123456789abcdef"
	waitFor    = 30 * time.Second // an asynchronous operation not done by then fails the benchmark
)

// Environment variables that size the run (time.ParseDuration syntax).
const (
	envBlock   = "TXKIT_CONCBENCH_BLOCK"   // each side's block per round (default 1s)
	envPGBench = "TXKIT_CONCBENCH_PGBENCH" // pgbench's run after each round (default 1s)
	// envOnly, "txkit" or "bare", runs that side alone (the other's figures are empty): for
	// profiling one side (go test -cpuprofile) or sampling its wait events.
	envOnly = "TXKIT_CONCBENCH_ONLY"
	// envGroup, a window ("2ms"; "0": off), gives the tcc, saga and 2pc coordinators
	// coordinator.WithGroupCommit(window); envDefer "0" or "1" gives them
	// coordinator.WithDeferredFinish(false or true). Both unset: the coordinators' defaults
	// (group commit 2ms, deferred finish on).
	envGroup = "TXKIT_CONCBENCH_GROUP"
	envDefer = "TXKIT_CONCBENCH_DEFER"
	// envVotes "1" or "0" gives the 2pc coordinator twopc.WithVoteMarkers(true or false); unset,
	// its default (on).
	envVotes = "TXKIT_CONCBENCH_VOTES"
	// envFloor "1" adds a third side to the recipes that have one: bare plus the writes txkit's
	// guarantees need, by hand (floor_test.go); reported as floor/s, floor-ratio (floor/bare),
	// txkit/floor and the floor's commits and CPU columns.
	envFloor = "TXKIT_CONCBENCH_FLOOR"
)

// recipe is one row group of the table: setup builds its components on pools that count commits
// and returns the txkit path, the bare baseline, and the pgbench script of the txkit path's writes
// (on the tables of pgbenchDDL; simple: substitute variables in the text).
type recipe struct {
	name    string
	clients []int // nil: 1, 16 and 64
	setup   func(b *testing.B, e *env) (txkit, bare concbench.Op, script string, simple bool)
}

// env is what a recipe's setup builds on.
type env struct {
	commits *concbench.Commits
	schemas []*testenv.Schema // every schema the recipe made (schema)
	// withFloor: the floor side is asked for (envFloor); floor is the recipe's, nil when it has
	// none (floor_test.go).
	withFloor bool
	floor     concbench.Op
}

// schema returns a schema of b's own and a pool on it, of poolConns connections, whose commits e
// counts (closed when b ends).
func (e *env) schema(b *testing.B) (*testenv.Schema, *pgxpool.Pool) {
	b.Helper()
	s := testenv.PG(b)
	e.schemas = append(e.schemas, s)
	return s, e.pool(b, s)
}

// primeBlock is how long each side runs, at primeClients clients, before a recipe is measured.
const (
	primeBlock   = 500 * time.Millisecond
	primeClients = 16
)

// prime brings the recipe's tables to a steady state before anything is measured: both paths run
// for primeBlock each at primeClients clients, then every table of the recipe's schemas is
// analyzed, as autovacuum does within a minute or so of a table's first writes. Without it the
// benchmark measures tables created seconds before, never analyzed: PostgreSQL caches the generic
// plan of each prepared statement (pgx prepares them) while its table is a page or two, where a
// sequential scan is cheapest, and keeps it as the table grows until the first analyze.
// ANALYZE invalidates those plans; the next call plans again.
func (e *env) prime(b *testing.B, sides ...concbench.Op) {
	b.Helper()
	ctx := context.Background()
	if err := concbench.NewRotation(primeClients, primeBlock, nil, sides...).Round(ctx); err != nil {
		b.Fatal(err)
	}
	names := make([]string, len(e.schemas))
	for i, s := range e.schemas {
		names[i] = s.Name
	}
	pool := testenv.PG(b).Pool
	rows, err := pool.Query(ctx, `select format('%I.%I', schemaname, tablename) from pg_tables where schemaname = any($1)`, names)
	if err != nil {
		b.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range tables {
		if _, err := pool.Exec(ctx, "analyze "+t); err != nil {
			b.Fatal(err)
		}
	}
}

// pool returns another pool on s, as schema's: a service of its own (a coordinator beside its
// participants) has a pool of its own.
func (e *env) pool(b *testing.B, s *testenv.Schema) *pgxpool.Pool {
	b.Helper()
	pool, err := e.commits.Pool(context.Background(), s.URL, poolConns)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

func mustExec(b *testing.B, pool *pgxpool.Pool, sql string, args ...any) {
	b.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		b.Fatalf("%s: %v", sql, err)
	}
}

// BenchmarkConcurrency measures every recipe at 1, 16 and 64 concurrent clients against its bare
// baseline: within each clients=N sub-benchmark, N goroutines call the txkit path in a closed loop
// for a block (TXKIT_CONCBENCH_BLOCK, 1 s), then N call the bare path for a block, the order
// rotating every round; -benchtime Kx runs K rounds. Reported: txkit/s and bare/s (operations per
// second of each side's blocks), ratio (txkit/bare), p50-ms and p99-ms of the txkit path
// (bare-p50-ms, bare-p99-ms of the bare one), pg-commits/op and bare-pg-commits/op (PostgreSQL
// transactions committed per operation, counted on every pool of the recipe: see
// concbench.Commits), and pg-ceiling/s: pgbench running a script of the txkit path's writes with
// N clients for TXKIT_CONCBENCH_PGBENCH (1 s) on the same server after each round (so that it
// meets the same load), scripts per second averaged over the rounds. Where the time goes, per
// side: go-cpu-ms/op (this process: clients, coordinators, participants' servers, relay,
// consumers), pg-cpu-ms/op (PostgreSQL's processes), jvm-cpu-ms/op (RocketMQ and ZooKeeper) and
// busy, the share of the machine's CPUs busy during the blocks (bench/cpustat; bare- for the
// bare side).
//
//	make bench-concurrency
//	go test -run '^$' -bench 'Concurrency/saga/clients=16' -benchtime 2x ./bench/concbench/
func BenchmarkConcurrency(b *testing.B) {
	block, err := concbench.DurationEnv(envBlock, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	pgbenchFor, err := concbench.DurationEnv(envPGBench, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := concbench.PGBenchPath(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ceilingDB := testenv.PG(b)
	if _, err := ceilingDB.Pool.Exec(ctx, pgbenchDDL); err != nil {
		b.Fatal(err)
	}
	for _, r := range recipes {
		b.Run(r.name, func(b *testing.B) {
			e := &env{commits: &concbench.Commits{}, withFloor: os.Getenv(envFloor) == "1"}
			txkit, bare, script, simple := r.setup(b, e)
			paths := []concbench.Op{txkit, bare}
			if e.floor != nil {
				paths = append(paths, e.floor)
			}
			// Warm the paths (connections, statement caches, routes) outside the blocks.
			for _, op := range paths {
				if err := op(ctx, 0); err != nil {
					b.Fatal(err)
				}
			}
			e.prime(b, paths...)
			clients := r.clients
			if clients == nil {
				clients = []int{1, 16, maxClients}
			}
			for _, n := range clients {
				b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
					sides := slices.Clone(paths)
					switch os.Getenv(envOnly) {
					case "txkit":
						sides[1] = nil
					case "bare":
						sides[0] = nil
					}
					rot := concbench.NewRotation(n, block, e.commits.Load, sides...)
					wait0 := e.commits.AcquireWait()
					var ceiling float64 // pgbench's scripts/s, averaged over the rounds
					rounds := 0
					for b.Loop() {
						if err := rot.Round(ctx); err != nil {
							b.Fatal(err)
						}
						// pgbench after each round, so that it meets the load the blocks met.
						tps, err := concbench.PGBench(ctx, ceilingDB.URL, script, n, pgbenchFor, simple)
						if err != nil {
							b.Fatal(err)
						}
						ceiling += tps
						rounds++
					}
					ceiling /= float64(max(rounds, 1))
					f := rot.Figures()
					if only := os.Getenv(envOnly); only != "" {
						// One side ran: the pools' acquire time is its own.
						ops := max(f[0].Ops+f[1].Ops, 1)
						b.ReportMetric(float64(e.commits.AcquireWait()-wait0)/float64(time.Millisecond)/float64(ops), "pool-acquire-ms/op")
					}
					ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
					b.ReportMetric(f[0].PerSecond(), "txkit/s")
					b.ReportMetric(f[1].PerSecond(), "bare/s")
					b.ReportMetric(f[0].PerSecond()/f[1].PerSecond(), "ratio")
					b.ReportMetric(ms(f[0].Percentile(0.5)), "p50-ms")
					b.ReportMetric(ms(f[0].Percentile(0.99)), "p99-ms")
					b.ReportMetric(ms(f[1].Percentile(0.5)), "bare-p50-ms")
					b.ReportMetric(ms(f[1].Percentile(0.99)), "bare-p99-ms")
					b.ReportMetric(f[0].CommitsPerOp(), "pg-commits/op")
					b.ReportMetric(f[1].CommitsPerOp(), "bare-pg-commits/op")
					b.ReportMetric(ceiling, "pg-ceiling/s")
					prefixes := []string{"", "bare-"}
					if len(f) > 2 {
						prefixes = append(prefixes, "floor-")
						b.ReportMetric(f[2].PerSecond(), "floor/s")
						b.ReportMetric(f[2].PerSecond()/f[1].PerSecond(), "floor-ratio")
						b.ReportMetric(f[0].PerSecond()/f[2].PerSecond(), "txkit/floor")
						b.ReportMetric(f[2].CommitsPerOp(), "floor-pg-commits/op")
					}
					for i, side := range prefixes {
						b.ReportMetric(cpustat.PerOp(f[i].CPU.Self, f[i].Ops), side+"go-cpu-ms/op")
						b.ReportMetric(cpustat.PerOp(f[i].CPU.Postgres, f[i].Ops), side+"pg-cpu-ms/op")
						b.ReportMetric(cpustat.PerOp(f[i].CPU.JVM, f[i].Ops), side+"jvm-cpu-ms/op")
						b.ReportMetric(f[i].CPU.BusyShare(), side+"busy")
					}
				})
			}
		})
	}
}

var recipes = []recipe{
	{"tcc", nil, tccRecipe},
	{"saga", nil, sagaRecipe},
	{"tcc-grpc", nil, tccGRPCRecipe}, // tcc and saga with gRPC participants (grpc_test.go)
	{"saga-grpc", nil, sagaGRPCRecipe},
	// a workflow against the saga of the same steps (workflow_test.go)
	{"workflow", nil, workflowRecipe},
	{"2pc", nil, twopcRecipe}, // 2 prepared transactions per transfer: 128 of the server's 256 at 64 clients
	{"relay", nil, relayRecipe},
	{"consumer", nil, consumerRecipe},
	{"notify", nil, notifyRecipe},
	{"claim", nil, claimRecipe},
	{"lock", nil, lockRecipe},
}

// pgbenchDDL is the tables the pgbench scripts write: a log row per operation (cb_log), its items
// (cb_item), barrier markers (cb_barrier), one counter row per client and side (c<i>, w<i>) and one
// for the lock, a lease table and 2PC's vote rows (cb_vote, as twopc's vote table).
const pgbenchDDL = `create table cb_log (id uuid primary key, status text not null, created_at timestamptz not null default now());
create table cb_item (id uuid not null, name text not null, status text not null, primary key (id, name));
create table cb_barrier (gid uuid not null, branch text not null, op text not null, primary key (gid, branch, op));
create table cb_counter (id text primary key, n bigint not null default 0, m bigint not null default 0);
insert into cb_counter (id) select p || i from generate_series(0, 63) i, unnest(array['c', 'w']) p;
insert into cb_counter (id) values ('lock');
create table cb_lease (name text primary key, holder uuid not null, token bigint not null);
create table cb_vote (id text collate "C" primary key, yes boolean not null, created_at timestamptz not null default now());
create index on cb_vote (created_at, id);
create sequence cb_token`

// participantScript is one barrier-guarded participant call: the marker and the counter update in
// one transaction.
func participantScript(branch, op, set string) string {
	return fmt.Sprintf("begin;\ninsert into cb_barrier values (:gid, '%s', '%s');\nupdate cb_counter set %s where id = 'c' || :client_id::text;\ncommit;\n", branch, op, set)
}

// counterDDL creates a counter row per client and branch name of the coordinator recipes.
const counterDDL = `create table bench_counter (id text primary key, reserved bigint not null default 0, used bigint not null default 0);
insert into bench_counter (id) select 'b' || i || '-c' || c from generate_series(0, 2) i, generate_series(0, 63) c`

func branch(i, client int) string { return fmt.Sprintf("b%d-c%d", i, client) }

// participants starts 3 HTTP participants over pool (barrier table in s) whose ops update the
// branch's counter row with sql, and returns them on one signing client with room for 64 clients'
// connections (the default transport keeps 2 idle per host), which the coordinator uses too.
func participants(b *testing.B, s *testenv.Schema, pool *pgxpool.Pool, sql map[participant.Op]string) ([]participant.HTTP, *http.Client) {
	b.Helper()
	mustExec(b, pool, counterDDL)
	var ops []participant.Op
	for op := range sql {
		ops = append(ops, op)
	}
	parts, _ := coretest.BenchParticipants(b, &testenv.Schema{Name: s.Name, URL: s.URL, Pool: pool}, secret, 3,
		func(ctx context.Context, tx pgx.Tx, _ string, req participant.Request) error {
			_, err := tx.Exec(ctx, sql[req.Op], req.Branch)
			return err
		}, ops)
	client, err := participant.NewSigningClient(secret, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * maxClients}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.CloseIdleConnections)
	for i := range parts {
		parts[i].Client = client
	}
	return parts, client
}

// coordinatorOn is coretest.BenchCoordinator on a given pool (one that counts commits: the pool
// BenchCoordinator makes cannot carry the Commits tracer).
func coordinatorOn[C coordinator.Base](b *testing.B, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error),
	pool *pgxpool.Pool, schema string, opts ...coordinator.Option) C {
	b.Helper()
	base := []coordinator.Option{coordinator.WithSchema(schema), coordinator.WithLogger(testenv.Logger(b))}
	if w := os.Getenv(envGroup); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil {
			b.Fatalf("%s=%q: %v", envGroup, w, err)
		}
		base = append(base, coordinator.WithGroupCommit(d))
	}
	switch os.Getenv(envDefer) {
	case "1":
		base = append(base, coordinator.WithDeferredFinish(true))
	case "0":
		base = append(base, coordinator.WithDeferredFinish(false))
	}
	c, err := newFn(pool, append(base, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c
}

// tccSQL is what the tcc recipes' participants run for each op on the branch's counter row.
var tccSQL = map[participant.Op]string{
	participant.OpTry:     `update bench_counter set reserved = reserved + 1 where id = $1`,
	participant.OpConfirm: `update bench_counter set reserved = reserved - 1, used = used + 1 where id = $1`,
	participant.OpCancel:  `update bench_counter set reserved = reserved - 1 where id = $1`,
}

// tcc: Begin, one Try of the 3 branches (tries concurrent), Commit (confirms concurrent) against
// the six calls, the 3 tries at once, then the 3 confirms at once.
func tccRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	s, pool := e.schema(b)
	parts, client := participants(b, s, pool, tccSQL)
	c := coordinatorOn(b, tcc.New, e.pool(b, s), s.Name, coordinator.WithHTTPClient(client))
	ps := make([]participant.Participant, len(parts))
	for i, p := range parts {
		ps[i] = p
	}
	noPayload := func(int, int) json.RawMessage { return nil }
	txkit, bare := tccSides(c, ps, ps, noPayload)
	e.floor = tccFloor(e.floorLog(b, s), ps, noPayload)
	return txkit, bare, tccScript(), false
}

// tccSides are the tcc recipes' two sides: a transaction of c with a branch on each of branches,
// given to one Try, and the same six calls made on parts (the participants the branches reach)
// as the coordinator makes them: the tries at once, then the confirms at once; payload is the
// payload of branch i of client cl.
func tccSides(c *tcc.Coordinator, branches, parts []participant.Participant, payload func(i, cl int) json.RawMessage) (txkit, bare concbench.Op) {
	txkit = func(ctx context.Context, cl int) error {
		g, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		bs := make([]tcc.Branch, len(branches))
		for i, p := range branches {
			bs[i] = tcc.Branch{Name: branch(i, cl), Participant: p, Payload: payload(i, cl)}
		}
		if err := g.Try(ctx, bs[0], bs[1:]...); err != nil {
			_ = g.Rollback(ctx)
			return err
		}
		return g.Commit(ctx)
	}
	bare = func(ctx context.Context, cl int) error {
		gid := uuid.Must(uuid.NewV7()).String()
		if err := tccPhase(ctx, parts, gid, cl, participant.OpTry, payload); err != nil {
			return err
		}
		return tccPhase(ctx, parts, gid, cl, participant.OpConfirm, payload)
	}
	return txkit, bare
}

// tccPhase makes op's call on each of parts at once, for client cl's branches of gid.
func tccPhase(ctx context.Context, parts []participant.Participant, gid string, cl int, op participant.Op, payload func(i, cl int) json.RawMessage) error {
	var eg errgroup.Group
	for i, p := range parts {
		eg.Go(func() error {
			return p.Do(ctx, participant.Request{GID: gid, Branch: branch(i, cl), Op: op, Payload: payload(i, cl)})
		})
	}
	return eg.Wait()
}

// tccScript is the pgbench script of a TCC transaction's writes over 3 participants: the record
// with its 3 branches (one Try), the 3 tries, the decision, the 3 confirms, the finish.
func tccScript() string {
	script := "begin;\ninsert into cb_log (id, status) values (gen_random_uuid(), 'trying') returning id as gid \\gset\n" +
		"insert into cb_item select :gid, 'b' || i, 'tried' from generate_series(0, 2) i;\ncommit;\n"
	for i := range 3 {
		script += participantScript(fmt.Sprint("b", i), "try", "n = n + 1")
	}
	script += "update cb_log set status = 'committing' where id = :gid;\n"
	for i := range 3 {
		script += participantScript(fmt.Sprint("b", i), "confirm", "n = n - 1, m = m + 1")
	}
	return script + "begin;\nupdate cb_log set status = 'committed' where id = :gid;\nupdate cb_item set status = 'done' where id = :gid;\ncommit;\n"
}

// sagaSQL is what the saga recipes' participants run for each op on the branch's counter row.
var sagaSQL = map[participant.Op]string{
	participant.OpAction:     `update bench_counter set used = used + 1 where id = $1`,
	participant.OpCompensate: `update bench_counter set used = used - 1 where id = $1`,
}

// saga: Begin, 3 Add, Submit against the three action calls one after the other.
func sagaRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	s, pool := e.schema(b)
	parts, client := participants(b, s, pool, sagaSQL)
	c := coordinatorOn(b, saga.New, e.pool(b, s), s.Name, coordinator.WithHTTPClient(client))
	ps := make([]participant.Participant, len(parts))
	for i, p := range parts {
		ps[i] = p
	}
	noPayload := func(int, int) json.RawMessage { return nil }
	txkit, bare := sagaSides(c, ps, ps, noPayload)
	e.floor = sagaFloor(e.floorLog(b, s), ps, noPayload)
	return txkit, bare, sagaScript(), false
}

// sagaSides are the saga recipes' two sides: a saga of c with a step on each of steps, and the
// same three action calls made on parts (the participants the steps reach) one after the other;
// payload is the payload of step i of client cl.
func sagaSides(c *saga.Coordinator, steps, parts []participant.Participant, payload func(i, cl int) json.RawMessage) (txkit, bare concbench.Op) {
	txkit = func(ctx context.Context, cl int) error {
		sg, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		for i, p := range steps {
			if err := sg.Add(saga.Step{Name: branch(i, cl), Participant: p, Payload: payload(i, cl)}); err != nil {
				return err
			}
		}
		return sg.Submit(ctx)
	}
	bare = func(ctx context.Context, cl int) error {
		return sagaActions(ctx, parts, uuid.Must(uuid.NewV7()).String(), cl, payload)
	}
	return txkit, bare
}

// sagaActions calls the action of each of parts, one after the other, for client cl's steps of gid.
func sagaActions(ctx context.Context, parts []participant.Participant, gid string, cl int, payload func(i, cl int) json.RawMessage) error {
	for i, p := range parts {
		if err := p.Do(ctx, participant.Request{GID: gid, Branch: branch(i, cl), Op: participant.OpAction, Payload: payload(i, cl)}); err != nil {
			return err
		}
	}
	return nil
}

// sagaScript is the pgbench script of a 3-step saga's writes.
func sagaScript() string {
	script := "begin;\ninsert into cb_log (id, status) values (gen_random_uuid(), 'running') returning id as gid \\gset\n" +
		"insert into cb_item select :gid, 's' || i, 'pending' from generate_series(0, 2) i;\ncommit;\n"
	for i := range 3 {
		script += participantScript(fmt.Sprint("s", i), "action", "m = m + 1")
	}
	return script + "begin;\nupdate cb_log set status = 'done' where id = :gid;\nupdate cb_item set status = 'done' where id = :gid;\ncommit;\n"
}

// 2pc: a transfer between two databases (schemas) through twopc against the hand-written
// PREPARE TRANSACTION / COMMIT PREPARED on both; each client moves money between accounts of its own.
func twopcRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	ctx := context.Background()
	ls, logPool := e.schema(b)
	_, east := e.schema(b)
	_, west := e.schema(b)
	for _, p := range []*pgxpool.Pool{east, west} {
		mustExec(b, p, `create table accounts (id text primary key, balance bigint not null);
			insert into accounts select 'a' || c, 1000000000 from generate_series(0, 63) c`)
	}
	var opts []coordinator.Option
	switch os.Getenv(envVotes) {
	case "1":
		opts = append(opts, twopc.WithVoteMarkers(true))
	case "0":
		opts = append(opts, twopc.WithVoteMarkers(false))
	}
	c := coordinatorOn(b, twopc.New, logPool, ls.Name, opts...)
	b.Cleanup(func() { _ = c.Close() })
	for name, p := range map[string]*pgxpool.Pool{"east": east, "west": west} {
		if err := c.RegisterDB(name, p); err != nil {
			b.Fatal(err)
		}
	}
	const debit, credit = `update accounts set balance = balance - 1 where id = $1`, `update accounts set balance = balance + 1 where id = $1`
	txkit := func(ctx context.Context, cl int) error {
		g, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		for _, side := range [][2]string{{"east", debit}, {"west", credit}} {
			if err := g.Enlist(ctx, side[0], func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, side[1], "a"+strconv.Itoa(cl))
				return err
			}); err != nil {
				_ = g.Abort(ctx)
				return err
			}
		}
		return g.Commit(ctx)
	}
	bare := func(ctx context.Context, cl int) error {
		arg := "a" + strconv.Itoa(cl)
		return concbench.HandPrepared(ctx, "concbench:"+uuid.NewString(),
			concbench.Prepared{Pool: east, SQL: debit, Args: []any{arg}}, concbench.Prepared{Pool: west, SQL: credit, Args: []any{arg}})
	}
	if fl := e.floorLog(b, ls); fl != nil {
		// The floor: the record with its two branches, then bare's transfer with a vote row in
		// each prepared transaction; the outcome deferred.
		const vote = `with v as (insert into fl_vote values ($2)) `
		for _, p := range []*pgxpool.Pool{east, west} {
			mustExec(b, p, `create table fl_vote (id text primary key)`)
		}
		e.floor = func(ctx context.Context, cl int) error {
			gid := uuid.Must(uuid.NewV7())
			if err := fl.record(ctx, cl, gid, "voting", []string{"east", "west"}, "enlisted"); err != nil {
				return err
			}
			id, arg := "concbench:"+gid.String(), "a"+strconv.Itoa(cl)
			if err := concbench.HandPrepared(ctx, id, concbench.Prepared{Pool: east, SQL: vote + debit, Args: []any{arg, id + ":0"}},
				concbench.Prepared{Pool: west, SQL: vote + credit, Args: []any{arg, id + ":1"}}); err != nil {
				return err
			}
			fl.finish[cl] = gid
			return nil
		}
	}
	b.Cleanup(func() {
		var n int
		if err := logPool.QueryRow(ctx, `select count(*) from pg_prepared_xacts where gid like 'concbench:%'`).Scan(&n); err == nil && n != 0 {
			b.Errorf("%d prepared transactions left by the bare path", n)
		}
	})
	if os.Getenv(envVotes) != "0" { // vote markers (the default): the record beside the votes, no decision
		return txkit, bare, `\set r random(1, 2000000000)
insert into cb_log (id, status) values (gen_random_uuid(), 'voting') returning id as gid \gset
insert into cb_item select ':gid', s, 'enlisted' from unnest(array['east', 'west']) s;
begin;
update cb_counter set n = n - 1 where id = 'c:client_id';
insert into cb_vote (id, yes) values ('cb-:client_id-:r-e', true);
prepare transaction 'cb-:client_id-:r-e';
begin;
update cb_counter set n = n + 1 where id = 'w:client_id';
insert into cb_vote (id, yes) values ('cb-:client_id-:r-w', true);
prepare transaction 'cb-:client_id-:r-w';
commit prepared 'cb-:client_id-:r-e';
commit prepared 'cb-:client_id-:r-w';
update cb_log set status = 'committed' where id = ':gid';
`, true
	}
	script := `\set r random(1, 2000000000)
insert into cb_log (id, status) values (gen_random_uuid(), 'preparing') returning id as gid \gset
insert into cb_item select ':gid', s, 'enlisted' from unnest(array['east', 'west']) s;
begin;
update cb_counter set n = n - 1 where id = 'c:client_id';
prepare transaction 'cb-:client_id-:r-e';
begin;
update cb_counter set n = n + 1 where id = 'w:client_id';
prepare transaction 'cb-:client_id-:r-w';
update cb_log set status = 'committing' where id = ':gid';
commit prepared 'cb-:client_id-:r-e';
commit prepared 'cb-:client_id-:r-w';
update cb_log set status = 'committed' where id = ':gid';
`
	return txkit, bare, script, true
}

// consumerFor runs a rocketmq.Consumer of topic whose handler runs apply (nil: nothing) and marks
// the message done in w; it returns once the consumer has received a message published through
// pub (the group's rebalance takes seconds).
func consumerFor(b *testing.B, pub *rocketmq.Publisher, pool *pgxpool.Pool, store *idempotency.Store, topic string, w *concbench.Waiters,
	apply func(ctx context.Context, tx pgx.Tx, id uuid.UUID) error) {
	b.Helper()
	c, err := rocketmq.NewConsumer(testenv.Namesrv(b), mqtest.ConsumerGroup(b), topic, pool, store,
		func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
			if apply != nil {
				if err := apply(ctx, tx, msg.ID); err != nil {
					return err
				}
			}
			w.Done(msg.ID.String())
			return nil
		}, rocketmq.WithConsumeGoroutines(poolConns))
	if err != nil {
		b.Fatal(err)
	}
	testenv.Run(b, c.Run)
	warm(b, w, func(ctx context.Context, id uuid.UUID) error {
		return pub.Publish(ctx, outbox.Message{ID: id, Topic: topic, Key: id.String(), Body: []byte("warm")})
	})
}

// warm sends a message with send every 2 s until one is seen in w (a new consumer group may miss
// the first ones while it rebalances), for at most 2 minutes.
func warm(b *testing.B, w *concbench.Waiters, send func(ctx context.Context, id uuid.UUID) error) {
	b.Helper()
	ctx := context.Background()
	for range 60 {
		id := uuid.New()
		w.Expect(id.String())
		if err := send(ctx, id); err != nil {
			b.Fatal(err)
		}
		if err := w.Wait(ctx, id.String(), 2*time.Second); err == nil {
			return
		}
	}
	b.Fatal("the consumer received nothing within 2 minutes")
}

// relay: a business row and Enqueue in one Outbox.Do transaction (handed to the relay right after
// the commit), relayed to RocketMQ and received by a rocketmq.Consumer, against the same business transaction then a direct SendSync to the same
// consumer. Each operation waits until its message reached the consumer's handler.
func relayRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	ctx := context.Background()
	s, pool := e.schema(b)
	mustExec(b, pool, `create table orders (id uuid primary key, total bigint not null)`)
	ob, err := outbox.New(pool, outbox.WithTable(s.Name, ""))
	if err != nil {
		b.Fatal(err)
	}
	store, err := idempotency.New(pool, idempotency.WithTable(s.Name, ""))
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []func(context.Context) error{ob.Migrate, store.Migrate} {
		if err := m(ctx); err != nil {
			b.Fatal(err)
		}
	}
	pub := mqtest.Publisher(b)
	topic := testenv.Topic(b)
	w := concbench.NewWaiters()
	consumerFor(b, pub, pool, store, topic, w, nil)
	r, err := outbox.NewRelay(ob, pub, outbox.WithElector(zkenv.Elector(b, testenv.ZKRoot(b)+"/relay", "bench")), outbox.WithLogger(testenv.Logger(b)))
	if err != nil {
		b.Fatal(err)
	}
	testenv.Run(b, r.Run)
	body := make([]byte, 256)
	order := func(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
		_, err := tx.Exec(ctx, `insert into orders values ($1, 4200)`, id)
		return err
	}
	txkit := func(ctx context.Context, _ int) error {
		id := uuid.Must(uuid.NewV7())
		w.Expect(id.String())
		if err := ob.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := order(ctx, tx, id); err != nil {
				return err
			}
			_, err := ob.Enqueue(ctx, tx, outbox.Message{ID: id, Topic: topic, Key: id.String(), Body: body})
			return err
		}); err != nil {
			return err
		}
		return w.Wait(ctx, id.String(), waitFor)
	}
	bare := func(ctx context.Context, _ int) error {
		id := uuid.Must(uuid.NewV7())
		w.Expect(id.String())
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return order(ctx, tx, id) }); err != nil {
			return err
		}
		if err := pub.Publish(ctx, outbox.Message{ID: id, Topic: topic, Key: id.String(), Body: body}); err != nil {
			return err
		}
		return w.Wait(ctx, id.String(), waitFor)
	}
	if fl := e.floorLog(b, s); fl != nil {
		// The floor: the message's row in the business transaction, deleted once published.
		e.floor = func(ctx context.Context, _ int) error {
			id := uuid.Must(uuid.NewV7())
			w.Expect(id.String())
			var bt pgx.Batch
			bt.Queue(`insert into orders values ($1, 4200)`, id)
			msgRow(&bt, id, body, "pending")
			if err := fl.inTx(ctx, &bt); err != nil {
				return err
			}
			if err := pub.Publish(ctx, outbox.Message{ID: id, Topic: topic, Key: id.String(), Body: body}); err != nil {
				return err
			}
			if _, err := fl.pool.Exec(ctx, `delete from fl_msg where id = $1`, id); err != nil {
				return err
			}
			return w.Wait(ctx, id.String(), waitFor)
		}
	}
	script := "begin;\ninsert into cb_log (id, status) values (gen_random_uuid(), 'order') returning id as gid \\gset\n" +
		"insert into cb_item values (:gid, 'outbox', 'pending');\ncommit;\n" +
		"delete from cb_item where id = :gid and name = 'outbox';\n" +
		"insert into cb_barrier values (:gid, 'consumer', 'claim');\n"
	return txkit, bare, script, false
}

// consumer: a message published to RocketMQ and applied (one row inserted) by a rocketmq.Consumer,
// which claims its ID in the same transaction, against a plain rocketmq-client-go push consumer
// applying it without the claim. Each operation waits until its message reached the handler
// (inside the handler's transaction, before its commit, on both sides).
func consumerRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	ctx := context.Background()
	s, pool := e.schema(b)
	mustExec(b, pool, `create table applied (id uuid primary key)`)
	store, err := idempotency.New(pool, idempotency.WithTable(s.Name, ""))
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	pub := mqtest.Publisher(b)
	apply := func(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
		_, err := tx.Exec(ctx, `insert into applied values ($1)`, id)
		return err
	}
	topic, bareTopic := testenv.Topic(b), testenv.Topic(b)
	w := concbench.NewWaiters()
	consumerFor(b, pub, pool, store, topic, w, apply)
	// Both handlers mark the message done in the transaction, before its commit, as the txkit
	// Handler must (it cannot see the Consumer's commit): each operation ends at the handler.
	plainConsumer(b, bareTopic, func(ctx context.Context, id uuid.UUID) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := apply(ctx, tx, id); err != nil {
				return err
			}
			w.Done(id.String())
			return nil
		})
	})
	warm(b, w, func(ctx context.Context, id uuid.UUID) error {
		return pub.Publish(ctx, outbox.Message{ID: id, Topic: bareTopic, Key: id.String(), Body: []byte("warm")})
	})
	body := make([]byte, 256)
	send := func(topic string) concbench.Op {
		return func(ctx context.Context, _ int) error {
			id := uuid.Must(uuid.NewV7())
			w.Expect(id.String())
			if err := pub.Publish(ctx, outbox.Message{ID: id, Topic: topic, Key: id.String(), Body: body}); err != nil {
				return err
			}
			return w.Wait(ctx, id.String(), waitFor)
		}
	}
	script := "begin;\ninsert into cb_barrier values (gen_random_uuid(), 'consumer', 'claim');\n" +
		"insert into cb_log (id, status) values (gen_random_uuid(), 'applied');\ncommit;\n"
	return send(topic), send(bareTopic), script, false
}

// plainConsumer runs a rocketmq-client-go push consumer of topic (a group of its own, as many
// consume goroutines as the txkit one) calling handle with each message's txkit id; a failed
// handle has the message redelivered.
func plainConsumer(b *testing.B, topic string, handle func(ctx context.Context, id uuid.UUID) error) {
	b.Helper()
	pc, err := rmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver(testenv.Namesrv(b))),
		consumer.WithGroupName(mqtest.ConsumerGroup(b)), consumer.WithInstance("concbench-"+uuid.NewString()[:8]),
		consumer.WithConsumeGoroutineNums(poolConns), consumer.WithConsumeMessageBatchMaxSize(1))
	if err != nil {
		b.Fatal(err)
	}
	if err := pc.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			id, err := uuid.Parse(m.GetProperty(rocketmq.PropertyID))
			if err != nil {
				continue // not ours
			}
			if err := handle(ctx, id); err != nil {
				return consumer.ConsumeRetryLater, err
			}
		}
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		b.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pc.Shutdown() })
}

// notify: a business row and Enqueue in one transaction, then Deliver (the first attempt, claimed
// and recorded, from the enqueuing process; the running notifier's leader takes what it does not
// finish) to an HTTP receiver, against the business transaction then the same signed POST from a
// plain http.Client. The txkit operation waits until the receiver got it.
func notifyRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	ctx := context.Background()
	s, pool := e.schema(b)
	mustExec(b, pool, `create table orders (id uuid primary key, total bigint not null)`)
	w := concbench.NewWaiters()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Done(r.Header.Get(notify.HeaderID))
		_, _ = rw.Write([]byte("success"))
	}))
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * maxClients}}
	b.Cleanup(client.CloseIdleConnections)
	n, err := notify.New(pool, []notify.Receiver{{Name: "r", URL: srv.URL, Secrets: []string{secret}, Echo: "success", Concurrency: maxClients}},
		notify.WithTable(s.Name, ""), notify.WithLogger(testenv.Logger(b)), notify.WithHTTPClient(client), notify.WithPlainHTTP(),
		notify.WithElector(zkenv.Elector(b, testenv.ZKRoot(b)+"/notify", "a")))
	if err != nil {
		b.Fatal(err)
	}
	if err := n.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	testenv.Run(b, n.Run)
	payload := json.RawMessage(`{"amount":1}`)
	order := func(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
		_, err := tx.Exec(ctx, `insert into orders values ($1, 100)`, id)
		return err
	}
	txkit := func(ctx context.Context, _ int) error {
		var id uuid.UUID
		// Do posts the notification from this process right after the commit.
		if err := n.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			key := uuid.Must(uuid.NewV7())
			if err := order(ctx, tx, key); err != nil {
				return err
			}
			var err error
			id, err = n.Enqueue(ctx, tx, notify.Notification{Receiver: "r", Key: key.String(), Payload: payload})
			w.Expect(id.String())
			return err
		}); err != nil {
			return err
		}
		return w.Wait(ctx, id.String(), waitFor)
	}
	// post is the bare side's signed POST of notification id, as Deliver makes it.
	post := func(ctx context.Context, id uuid.UUID) error {
		body, err := json.Marshal(notify.Delivery{ID: id, Receiver: "r", Key: id.String(), Payload: payload, CreatedAt: time.Now()})
		if err != nil {
			return err
		}
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader(body))
		if err != nil {
			return err
		}
		ts := time.Now().Unix()
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(notify.HeaderID, id.String())
		r.Header.Set(notify.HeaderReceiver, "r")
		r.Header.Set(notify.HeaderTimestamp, strconv.FormatInt(ts, 10))
		r.Header.Set(notify.HeaderSignature, notify.Sign(secret, ts, http.MethodPost, "/", body))
		resp, err := client.Do(r)
		if err != nil {
			return err
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(answer) != "success" {
			return fmt.Errorf("bare post: HTTP %d %q", resp.StatusCode, answer)
		}
		return nil
	}
	bare := func(ctx context.Context, _ int) error {
		id := uuid.Must(uuid.NewV7())
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return order(ctx, tx, id) }); err != nil {
			return err
		}
		return post(ctx, id)
	}
	if fl := e.floorLog(b, s); fl != nil {
		// The floor: the notification's row, claimed, in the business transaction; the signed
		// POST; the delivery recorded.
		e.floor = func(ctx context.Context, _ int) error {
			id := uuid.Must(uuid.NewV7())
			var bt pgx.Batch
			bt.Queue(`insert into orders values ($1, 100)`, id)
			msgRow(&bt, id, payload, "claimed")
			if err := fl.inTx(ctx, &bt); err != nil {
				return err
			}
			if err := post(ctx, id); err != nil {
				return err
			}
			_, err := fl.pool.Exec(ctx, `update fl_msg set status = 'delivered' where id = $1`, id)
			return err
		}
	}
	// The business row and the notification, claimed, in one transaction; then the record.
	script := "begin;\ninsert into cb_log (id, status) values (gen_random_uuid(), 'order') returning id as gid \\gset\n" +
		"insert into cb_item values (:gid, 'notification', 'claimed');\ncommit;\n" +
		"update cb_item set status = 'delivered' where id = :gid and name = 'notification';\n"
	return txkit, bare, script, false
}

// claim: begin, Store.Claim of a new key, commit, against a hand-written INSERT … ON CONFLICT DO
// NOTHING into an equivalent table.
func claimRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	s, pool := e.schema(b)
	st, err := idempotency.New(pool, idempotency.WithTable(s.Name, ""))
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	mustExec(b, pool, `create table plain_keys (scope text not null, key text not null, status text not null default 'completed',
		created_at timestamptz not null default now(), expires_at timestamptz not null default now() + interval '7 days', primary key (scope, key));
		create index on plain_keys (expires_at)`)
	txkit := func(ctx context.Context, _ int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := st.Claim(ctx, tx, "bench", uuid.NewString())
			return err
		})
	}
	bare := func(ctx context.Context, _ int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `insert into plain_keys (scope, key) values ($1, $2) on conflict do nothing`, "bench", uuid.NewString())
			return err
		})
	}
	return txkit, bare, "begin;\ninsert into cb_barrier values (gen_random_uuid(), 'claim', 'claimed') on conflict do nothing;\ncommit;\n", false
}

// lock: every client updates a counter row under one PostgreSQL lease lock with pglock.Mutex.Do
// (a Mutex value each; the take, the update and the release in one transaction), against the same
// update in a transaction serialised by pg_advisory_xact_lock. With several clients the lock
// passes from one to the next at each commit.
func lockRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	s, pool := e.schema(b)
	mustExec(b, pool, `create table lock_counter (id int primary key, n bigint not null); insert into lock_counter values (1, 0)`)
	cl, err := pglock.New(pool, pglock.WithSchema(s.Name), pglock.WithLogger(testenv.Logger(b)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cl.Close() }) // before the pool's Close (cleanups run last first)
	if err := cl.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	ms := make([]*pglock.Mutex, maxClients)
	for i := range ms {
		if ms[i], err = cl.NewMutex("handoff"); err != nil {
			b.Fatal(err)
		}
	}
	const update = `update lock_counter set n = n + 1 where id = 1`
	txkit := func(ctx context.Context, c int) error {
		return ms[c].Do(ctx, func(ctx context.Context, tx pgx.Tx, _ lock.Token) error {
			_, err := tx.Exec(ctx, update)
			return err
		})
	}
	bare := func(ctx context.Context, _ int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(7007)`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, update)
			return err
		})
	}
	script := `select pg_advisory_lock(7007);
insert into cb_lease values ('lock', gen_random_uuid(), nextval('cb_token')) on conflict (name) do update set holder = excluded.holder, token = excluded.token;
update cb_counter set n = n + 1 where id = 'lock';
delete from cb_lease where name = 'lock';
select pg_advisory_unlock(7007);
`
	return txkit, bare, script, false
}
