package shard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/coordinator/shard"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
)

const envStarter = "TXKIT_SHARD_STARTER"

func TestMain(m *testing.M) {
	if code, ok := testenv.RunWorker(envStarter, starter); ok {
		os.Exit(code)
	}
	testenv.VerifyNoLeaks(m)
}

// party counts the ops it is asked to do, by "op" and "op/gid".
type party struct {
	mu    sync.Mutex
	calls map[string]int
	block participant.Op // an op it blocks on until the call's ctx ends (0: none)
}

func newParty() *party { return &party{calls: map[string]int{}} }

func (p *party) Do(ctx context.Context, req participant.Request) error {
	if p.block != 0 && req.Op == p.block {
		<-ctx.Done()
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[req.Op.String()]++
	p.calls[req.Op.String()+"/"+req.GID]++
	return nil
}

func (p *party) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

// router returns a Router over tcc coordinators on dbs with the test's options and opts(db),
// each on a pool of its own when fresh (one process's), else on the test's pool.
func router(t *testing.T, dbs []*testenv.Schema, fresh bool, opts func(db *testenv.Schema) []coordinator.Option) *shard.Router[*tcc.Global, *tcc.Coordinator] {
	t.Helper()
	var cs []*tcc.Coordinator
	for _, db := range dbs {
		pool := db.Pool
		if fresh {
			var err error
			if pool, err = pgxpool.New(t.Context(), db.URL); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
		}
		var o []coordinator.Option
		if opts != nil {
			o = opts(db)
		}
		c, err := tcc.New(pool, coretest.Options(t, db.Name, o...)...)
		if err != nil {
			t.Fatal(err)
		}
		coretest.FlushAtCleanup(t, c)
		cs = append(cs, c)
	}
	r, err := shard.New(cs...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// instance is one process's migrated router over the shards (its own pools and coordinators).
func instance(t *testing.T, dbs []*testenv.Schema) *shard.Router[*tcc.Global, *tcc.Coordinator] {
	t.Helper()
	r := router(t, dbs, true, nil)
	if err := r.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return r
}

// rows returns the number of transactions in each shard's log.
func rows(t *testing.T, dbs []*testenv.Schema, where string) []int {
	t.Helper()
	out := make([]int, len(dbs))
	for i, db := range dbs {
		if err := db.Pool.QueryRow(t.Context(), `select count(*) from txkit_global `+where).Scan(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestIntegrationShardRoutingAcrossInstances: transactions begun through one instance's router,
// with gids of its making and given ones, are each logged on exactly the shard their gid hashes
// to, spread over all three shards (each its own PostgreSQL server), and another instance's
// router, with its own pools and coordinators, finds every one by its gid.
func TestIntegrationShardRoutingAcrossInstances(t *testing.T) {
	dbs := testenv.PGShards(t, 3)
	a, b := instance(t, dbs), instance(t, dbs)
	h, err := a.Register("p", newParty())
	if err != nil {
		t.Fatal(err)
	}
	var gids []string
	for i := range 30 {
		var opts []coordinator.BeginOption
		if i%3 == 0 {
			opts = append(opts, coordinator.WithGID(fmt.Sprintf("order-%d", i)))
		}
		g, err := a.Begin(t.Context(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Try(t.Context(), tcc.Branch{Name: "stock", Participant: h}); err != nil {
			t.Fatal(err)
		}
		if err := g.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		gids = append(gids, g.GID())
	}
	// The finishes are deferred (the default): they reach the log with the next write or within
	// 100 ms; Flush sends them now, as an instance does before another reads its outcomes.
	if err := a.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	perShard := rows(t, dbs, "")
	for i, n := range perShard {
		if n < 5 {
			t.Errorf("shard %d holds %d of 30 transactions (%v), want them spread", i, n, perShard)
		}
	}
	for _, gid := range gids {
		st, err := b.Status(t.Context(), gid)
		if err != nil || st != core.StatusConfirmed {
			t.Errorf("the other instance: Status(%s) = %v, %v; want confirmed", gid, st, err)
		}
		want := core.ShardOf(gid, 3)
		for i, db := range dbs {
			var n int
			if err := db.Pool.QueryRow(t.Context(), `select count(*) from txkit_global where gid = $1`, gid).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if (n == 1) != (i == want) {
				t.Errorf("%s: %d rows on shard %d, its shard is %d", gid, n, i, want)
			}
		}
		if b.For(gid) != b.Shards()[want] {
			t.Errorf("For(%s) is not shard %d", gid, want)
		}
	}
	t.Logf("30 transactions over 3 shards: %v", perShard)

	// A shard's coordinator used directly takes only gids of its shard.
	c := b.Shards()[0]
	g, err := c.Begin(t.Context())
	if err != nil || core.ShardOf(g.GID(), 3) != 0 {
		t.Fatalf("shard 0's Begin: %v, gid %v of shard %d", err, g, core.ShardOf(g.GID(), 3))
	}
	other := gids[0]
	for _, gid := range gids {
		if core.ShardOf(gid, 3) != 0 {
			other = gid + "-x"
			break
		}
	}
	for core.ShardOf(other, 3) == 0 {
		other += "x"
	}
	if _, err := c.Begin(t.Context(), coordinator.WithGID(other)); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("shard 0's Begin(WithGID(%s of shard %d)) = %v, want ErrInvalidOption", other, core.ShardOf(other, 3), err)
	}
}

// TestIntegrationShardMismatchRefused: once three logs are shards 0, 1, 2 of 3, an instance
// given two of them, or the three in another order, is refused at Migrate and at Run (where a
// gid would be routed elsewhere than the first instance logged it); New refuses no shard, a
// shard given twice and a coordinator that is another Router's shard at another place.
func TestIntegrationShardMismatchRefused(t *testing.T) {
	dbs := testenv.PGShards(t, 3)
	instance(t, dbs)
	elector := func(db *testenv.Schema) []coordinator.Option {
		return []coordinator.Option{coordinator.WithElector(zkenv.Elector(t, testenv.ZKRoot(t)+"/"+db.Name, "x"))}
	}
	for name, r := range map[string]*shard.Router[*tcc.Global, *tcc.Coordinator]{
		"two of three": router(t, dbs[:2], false, elector),
		"reordered":    router(t, []*testenv.Schema{dbs[1], dbs[0], dbs[2]}, false, elector),
	} {
		err := r.Migrate(t.Context())
		if !errors.Is(err, coordinator.ErrInvalidOption) || !strings.Contains(err.Error(), "shard") {
			t.Errorf("%s: Migrate = %v, want ErrInvalidOption naming the shard", name, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err = r.Run(ctx)
		cancel()
		if !errors.Is(err, coordinator.ErrInvalidOption) {
			t.Errorf("%s: Run = %v, want ErrInvalidOption", name, err)
		}
	}

	c, err := tcc.New(dbs[0].Pool, coordinator.WithSchema(dbs[0].Name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shard.New[*tcc.Global, *tcc.Coordinator](); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Errorf("New() = %v, want ErrInvalidOption", err)
	}
	if _, err := shard.New(c, c); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Errorf("New(c, c) = %v, want ErrInvalidOption", err)
	}
	if _, err := shard.New(c); err != nil {
		t.Fatal(err)
	}
	if _, err := shard.New(c); err != nil {
		t.Errorf("New(c) again, at the same place: %v", err)
	}
	d, err := tcc.New(dbs[1].Pool, coordinator.WithSchema(dbs[1].Name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shard.New(d, c); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Errorf("New(d, c) with c shard 0 of 1 already = %v, want ErrInvalidOption", err)
	}
}

// starterConfig is what the starter process is given.
type starterConfig struct {
	URLs, Schemas []string
	N             int
}

// starter begins N transactions through a router over the shards, tries two branches of each
// and commits them all, its participant blocking on every confirm, and waits to be killed.
func starter(ctx context.Context, cfg starterConfig) error {
	var cs []*tcc.Coordinator
	for i, u := range cfg.URLs {
		pool, err := pgxpool.New(ctx, u)
		if err != nil {
			return err
		}
		defer pool.Close()
		c, err := tcc.New(pool, coordinator.WithSchema(cfg.Schemas[i]), coordinator.WithLease(2*time.Second))
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	r, err := shard.New(cs...)
	if err != nil {
		return err
	}
	p := newParty()
	p.block = participant.OpConfirm
	h, err := r.Register("p", p)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for range cfg.N {
		g, err := r.Begin(ctx)
		if err != nil {
			return err
		}
		for _, b := range []string{"stock", "account"} {
			if err := g.Try(ctx, tcc.Branch{Name: b, Participant: h}); err != nil {
				return err
			}
		}
		wg.Go(func() { _ = g.Commit(ctx) }) // blocks on the confirms until killed
	}
	<-ctx.Done()
	return nil
}

// TestIntegrationShardRecoveredAfterStarterKill: a starter process commits six transactions
// spread over three shards (each its own PostgreSQL server) and is SIGKILLed while its confirms
// hang; each shard's leader — its own election (a ZooKeeper path per shard) and fence (in its own
// database) — confirms the transactions of its shard, and only those.
func TestIntegrationShardRecoveredAfterStarterKill(t *testing.T) {
	dbs := testenv.PGShards(t, 3)
	root := testenv.ZKRoot(t)
	var cs []*tcc.Coordinator
	for i, db := range dbs {
		el := zkenv.Elector(t, fmt.Sprintf("%s/tcc-shard%d", root, i), "leader")
		cs = append(cs, coretest.New(t, tcc.New, db.Pool, db.Name, coordinator.WithElector(el), coordinator.WithLease(2*time.Second)))
	}
	r, err := shard.New(cs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := newParty()
	if _, err := r.Register("p", p); err != nil {
		t.Fatal(err)
	}

	cfg := starterConfig{N: 6}
	for _, db := range dbs {
		cfg.URLs, cfg.Schemas = append(cfg.URLs, db.URL), append(cfg.Schemas, db.Name)
	}
	w := testenv.StartWorker(t, envStarter, cfg, "starter")
	testenv.Eventually(t, time.Minute, 50*time.Millisecond, func() bool {
		n := 0
		for _, k := range rows(t, dbs, "where status = 'confirming'") {
			n += k
		}
		return n == cfg.N
	}, "the starter did not decide its %d transactions", cfg.N)
	w.Kill()
	perShard := rows(t, dbs, "")
	t.Logf("SIGKILLed the starter with its transactions decided, confirms pending; per shard: %v", perShard)
	for i, n := range perShard {
		if n != 2 {
			t.Fatalf("shard %d holds %d of the 6 transactions, want 2 (the router begins on the shards in turn)", i, n)
		}
	}

	testenv.Run(t, r.Run)
	testenv.Eventually(t, time.Minute, 50*time.Millisecond, func() bool {
		n := 0
		for _, k := range rows(t, dbs, "where status = 'confirmed'") {
			n += k
		}
		return n == cfg.N
	}, "the shards' leaders did not confirm the %d transactions", cfg.N)
	for i, db := range dbs {
		var gids []string
		rs, err := db.Pool.Query(t.Context(), `select gid from txkit_global`)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var g string
			if err := rs.Scan(&g); err != nil {
				t.Fatal(err)
			}
			gids = append(gids, g)
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		for _, g := range gids {
			if core.ShardOf(g, 3) != i || p.count("confirm/"+g) != 2 {
				t.Errorf("shard %d: %s (of shard %d) confirmed %d times by the leaders, want 2", i, g, core.ShardOf(g, 3), p.count("confirm/"+g))
			}
		}
		// Each shard's leader passed its own fence, in its own database.
		var fenced int
		if err := db.Pool.QueryRow(t.Context(), `select count(*) from txkit_fence where epoch > 0`).Scan(&fenced); err != nil {
			t.Fatal(err)
		}
		if fenced != 1 {
			t.Errorf("shard %d: %d fence rows with a token, want 1 (its own leader's)", i, fenced)
		}
	}
}

// TestIntegrationShardSaga: sagas routed over two shards run, and Stats adds up the shards'.
func TestIntegrationShardSaga(t *testing.T) {
	dbs := testenv.PGShards(t, 2)
	var cs []*saga.Coordinator
	for _, db := range dbs {
		cs = append(cs, coretest.New(t, saga.New, db.Pool, db.Name))
	}
	r, err := shard.New(cs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	h, err := r.Register("p", newParty())
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		s, err := r.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add(saga.Step{Name: "a", Participant: h}); err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(t.Context()); err != nil {
			t.Fatal(err)
		}
		if st, err := r.Status(t.Context(), s.GID()); err != nil || st != core.StatusSucceeded {
			t.Fatalf("Status(%s) = %v, %v; want succeeded", s.GID(), st, err)
		}
	}
	var n [2]int
	for i, db := range dbs {
		if err := db.Pool.QueryRow(t.Context(), `select count(*) from txkit_saga_global`).Scan(&n[i]); err != nil {
			t.Fatal(err)
		}
	}
	if n != [2]int{2, 2} {
		t.Fatalf("sagas per shard %v, want [2 2]", n)
	}
}
