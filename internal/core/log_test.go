package core_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

func httpBranch(name string) core.Branch {
	return core.Branch{Name: name, Target: core.Target{Kind: core.TargetHTTP, Ref: "http://127.0.0.1:1/" + name}}
}

func get(t testing.TB, l *core.Log, gid string) *core.Transaction {
	t.Helper()
	tx, err := l.Get(t.Context(), gid)
	if err != nil {
		t.Fatalf("Get(%s): %v", gid, err)
	}
	return tx
}

func TestIntegrationLogLifecycle(t *testing.T) {
	ctx := t.Context()
	l := newLog(t)
	if err := l.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	const gid = "g1"
	if err := l.Create(ctx, gid, core.KindTCC, time.Minute, []byte(`{"order":1}`)); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := l.Create(ctx, gid, core.KindTCC, time.Minute, nil); !errors.Is(err, core.ErrInvalidState) {
		t.Fatalf("Create duplicate = %v, want ErrInvalidState", err)
	}
	for i, b := range []string{"stock", "account"} {
		br := httpBranch(b)
		br.Seq = i
		if err := l.AddBranch(ctx, gid, core.StatusTrying, br); err != nil {
			t.Fatalf("AddBranch(%s): %v", b, err)
		}
	}
	tests := []struct {
		name string
		gid  string
		b    core.Branch
		want error
	}{
		{"empty name", gid, core.Branch{Target: core.Target{Kind: core.TargetInProc, Ref: "x"}}, core.ErrInvalidBranch},
		{"no target", gid, core.Branch{Name: "x"}, core.ErrInvalidBranch},
		{"duplicate", gid, httpBranch("stock"), core.ErrInvalidBranch},
		{"unknown gid", "nope", httpBranch("stock"), core.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := l.AddBranch(ctx, tc.gid, core.StatusTrying, tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("AddBranch = %v, want %v", err, tc.want)
			}
		})
	}

	if _, err := l.Decide(ctx, gid, core.StatusTrying, core.StatusConfirming); err != nil {
		t.Fatalf("Decide: %v", err)
	}
	if _, err := l.Decide(ctx, gid, core.StatusTrying, core.StatusConfirming); err != nil {
		t.Fatalf("Decide again (idempotent): %v", err)
	}
	if _, err := l.Decide(ctx, gid, core.StatusTrying, core.StatusCancelling); !errors.Is(err, core.ErrInvalidState) {
		t.Fatalf("Decide cancelling after confirming = %v, want ErrInvalidState", err)
	}
	if _, err := l.Decide(ctx, gid, core.StatusConfirming, core.StatusCancelling); !errors.Is(err, core.ErrInvalidState) {
		t.Fatalf("Decide confirming → cancelling = %v, want ErrInvalidState", err)
	}
	if _, err := l.Decide(ctx, "nope", core.StatusTrying, core.StatusConfirming); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Decide unknown = %v, want ErrNotFound", err)
	}
	if err := l.AddBranch(ctx, gid, core.StatusTrying, httpBranch("late")); !errors.Is(err, core.ErrInvalidState) {
		t.Fatalf("AddBranch after the decision = %v, want ErrInvalidState", err)
	}

	// One confirm succeeds, one fails: counted, stored, rescheduled with backoff.
	before := get(t, l, gid)
	err := l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusConfirming, Done: []string{"stock"},
		Failed: []core.BranchFailure{{Branch: "account", Err: errors.New("HTTP 500")}}})
	if err != nil {
		t.Fatalf("Record partial: %v", err)
	}
	tx := get(t, l, gid)
	if tx.Status != core.StatusConfirming || tx.Attempts != 1 || tx.LastError != "branch account: HTTP 500" {
		t.Fatalf("after a failure: %+v", tx)
	}
	if !tx.NextRetryAt.After(before.UpdatedAt) {
		t.Fatalf("next_retry_at %v not after %v", tx.NextRetryAt, before.UpdatedAt)
	}
	if b := tx.Branches; len(b) != 2 || b[0].Name != "stock" || b[0].Status != core.BranchConfirmed ||
		b[1].Status != core.BranchPending || b[1].Attempts != 1 || b[1].LastError != "HTTP 500" {
		t.Fatalf("branches after a failure: %+v", b)
	}
	// Both branches changed (one done, one failed): their updated_at moved past their recording.
	for i, b := range tx.Branches {
		if !b.UpdatedAt.After(before.Branches[i].UpdatedAt) {
			t.Fatalf("branch %s: updated_at %v not after %v", b.Name, b.UpdatedAt, before.Branches[i].UpdatedAt)
		}
	}

	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusConfirming,
		Done: []string{"stock", "account"}, Next: core.StatusConfirmed}); err != nil {
		t.Fatalf("Record finish: %v", err)
	}
	// A second driver finishing the same transaction is harmless.
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusConfirming,
		Done: []string{"account"}, Next: core.StatusConfirmed}); err != nil {
		t.Fatalf("Record finish again: %v", err)
	}
	tx = get(t, l, gid)
	if tx.Status != core.StatusConfirmed || tx.Attempts != 0 || string(tx.Payload) != `{"order":1}` {
		t.Fatalf("finished: %+v", tx)
	}
	for _, b := range tx.Branches {
		if b.Status != core.BranchConfirmed {
			t.Fatalf("branch %s is %s", b.Name, b.Status)
		}
	}
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusCancelling, Next: core.StatusCancelled}); !errors.Is(err, core.ErrInvalidState) {
		t.Fatalf("Record cancelled on a confirmed transaction = %v, want ErrInvalidState", err)
	}

	if _, err := l.Get(ctx, "nope"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Get unknown = %v, want ErrNotFound", err)
	}
	if err := l.Create(ctx, "g2", core.KindTCC, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	all, err := l.List(ctx, core.Filter{})
	if err != nil || len(all) != 2 {
		t.Fatalf("List all = %d, %v", len(all), err)
	}
	open, err := l.List(ctx, core.Filter{Kind: core.KindTCC, Unfinished: true})
	if err != nil || len(open) != 1 || open[0].GID != "g2" || open[0].Status != core.StatusTrying {
		t.Fatalf("List unfinished = %+v, %v", open, err)
	}
	page, err := l.List(ctx, core.Filter{After: "g1", Limit: 1})
	if err != nil || len(page) != 1 || page[0].GID != "g2" {
		t.Fatalf("List after g1 = %+v, %v", page, err)
	}
	// OlderThan compares created_at with PostgreSQL's clock: nothing here is an hour old, and
	// both transactions soon are a millisecond old.
	if old, err := l.List(ctx, core.Filter{OlderThan: time.Hour}); err != nil || len(old) != 0 {
		t.Fatalf("List older than 1h = %+v, %v", old, err)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
		old, err := l.List(ctx, core.Filter{OlderThan: time.Millisecond})
		return err == nil && len(old) == 2
	}, "List older than 1ms does not return both transactions")
}

func TestIntegrationOptions(t *testing.T) {
	s := testenv.PG(t)
	tests := []struct {
		name string
		opts []core.LogOption
	}{
		{"lease", []core.LogOption{core.WithLease(0)}},
		{"backoff", []core.LogOption{core.WithBackoff(time.Second, time.Millisecond)}},
		{"prefix", []core.LogOption{core.WithTablePrefix(string(make([]byte, 60)))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := core.New(s.Pool, tc.opts...); !errors.Is(err, core.ErrInvalidOption) {
				t.Fatalf("New = %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := core.New(nil); !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("New(nil) = %v", err)
	}
}

// A deposed leader's record is refused by the fence and changes nothing.
func TestIntegrationRecordFenced(t *testing.T) {
	ctx := t.Context()
	l := newLog(t)
	const gid = "g"
	if err := l.Create(ctx, gid, core.KindTCC, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.AddBranch(ctx, gid, core.StatusTrying, httpBranch("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Decide(ctx, gid, core.StatusTrying, core.StatusCancelling); err != nil {
		t.Fatal(err)
	}
	// Two recoverers' leaderships, one after the other: the first's token is older.
	path := testenv.ZKRoot(t) + "/leader"
	first, err := elector(t, path, "first").Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := first.Token()
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := elector(t, path, "second").Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Resign(context.WithoutCancel(ctx)) //nolint:errcheck
	cur := second.Token()
	if !old.Less(cur) {
		t.Fatalf("tokens %s, %s", old, cur)
	}
	if err := l.Record(ctx, cur, core.Progress{GID: gid, From: core.StatusCancelling,
		Failed: []core.BranchFailure{{Branch: "a", Err: errors.New("down")}}}); err != nil {
		t.Fatalf("Record by the current leader: %v", err)
	}
	before := get(t, l, gid)
	err = l.Record(ctx, old, core.Progress{GID: gid, From: core.StatusCancelling, Done: []string{"a"}, Next: core.StatusCancelled})
	if !errors.Is(err, lock.ErrFenced) {
		t.Fatalf("Record by the deposed leader = %v, want lock.ErrFenced", err)
	}
	after := get(t, l, gid)
	if after.Status != core.StatusCancelling || after.Attempts != before.Attempts || after.Branches[0].Status != core.BranchPending ||
		!after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("the fenced record changed the log: before %+v, after %+v", before, after)
	}
}

// recorder is a Driver that records its drives and finishes each transaction, or fails while
// fail is set.
type recorder struct {
	l      *core.Log
	mu     sync.Mutex
	drives map[string]int
	fail   error
}

func (r *recorder) Drive(ctx context.Context, tok lock.Token, t *core.Transaction) error {
	r.mu.Lock()
	r.drives[t.GID]++
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		return fail
	}
	var names []string
	for _, b := range t.Branches {
		names = append(names, b.Name)
	}
	next, _ := t.Status.Outcome()
	return r.l.Record(ctx, tok, core.Progress{GID: t.GID, From: t.Status, Done: names, Next: next})
}

func (r *recorder) count(gid string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drives[gid]
}

// The leader cancels a transaction left trying past its timeout, retries failed drives with
// backoff (counted, stored), leaves transactions under a starter's lease alone, and the retention
// job deletes finished transactions.
func TestIntegrationRecoverer(t *testing.T) {
	ctx := t.Context()
	l := newLog(t, core.WithLease(time.Hour), core.WithBackoff(10*time.Millisecond, 20*time.Millisecond))
	for _, gid := range []string{"timeout", "leased", "failing"} {
		timeout := time.Hour
		if gid == "timeout" {
			timeout = 100 * time.Millisecond
		}
		if err := l.Create(ctx, gid, core.KindTCC, timeout, nil); err != nil {
			t.Fatal(err)
		}
		if err := l.AddBranch(ctx, gid, core.StatusTrying, httpBranch("a")); err != nil {
			t.Fatal(err)
		}
	}
	// "leased" is being confirmed by its starter (lease one hour): the leader must not touch it.
	if _, err := l.Decide(ctx, "leased", core.StatusTrying, core.StatusConfirming); err != nil {
		t.Fatal(err)
	}
	drv := &recorder{l: l, drives: map[string]int{}}
	el := elector(t, testenv.ZKRoot(t)+"/leader", "r1")
	r, err := core.NewRecoverer(l, el, map[core.Kind]core.Driver{core.KindTCC: drv},
		core.WithSchedule("@every 100ms"), core.WithRetention(time.Hour, "@every 100ms"), core.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	run(t, r.Run)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return get(t, l, "timeout").Status == core.StatusCancelled
	}, "the timed-out transaction is cancelled")
	if tx := get(t, l, "timeout"); tx.Branches[0].Status != core.BranchCancelled {
		t.Fatalf("branch of the timed-out transaction: %+v", tx.Branches)
	}
	if st := r.Stats(); st.TimedOut != 1 {
		t.Fatalf("stats %+v, want TimedOut 1", st)
	}
	if drv.count("leased") != 0 || drv.count("failing") != 0 {
		t.Fatalf("the leader drove transactions that were not due: %v", drv.drives)
	}
	if err := r.Run(ctx); !errors.Is(err, core.ErrRunning) {
		t.Fatalf("second Run = %v, want ErrRunning", err)
	}

	// A failing drive is rescheduled with backoff and counted, never dropped.
	drv.mu.Lock()
	drv.fail = errors.New("participant down")
	drv.mu.Unlock()
	if _, err := l.Decide(ctx, "failing", core.StatusTrying, core.StatusCancelling); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "failing", From: core.StatusCancelling, Err: errors.New("starter gave up")}); err != nil {
		t.Fatal(err) // the starter's own failure makes it due soon despite the hour-long lease
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		tx := get(t, l, "failing")
		return tx.Attempts >= 3 && tx.LastError == "participant down"
	}, "failed drives are counted and stored")
	drv.mu.Lock()
	drv.fail = nil
	drv.mu.Unlock()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return get(t, l, "failing").Status == core.StatusCancelled
	}, "the failing transaction is cancelled once the participant is back")
	if st := r.Stats(); st.Failed < 2 {
		t.Fatalf("stats %+v, want Failed ≥ 2", st)
	}
}

func TestIntegrationRetention(t *testing.T) {
	ctx := t.Context()
	l, s := newLogOn(t)
	for _, gid := range []string{"done", "open"} {
		if err := l.Create(ctx, gid, core.KindTCC, time.Hour, nil, httpBranch("a"), httpBranch("b")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Decide(ctx, "done", core.StatusTrying, core.StatusCancelling); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "done", From: core.StatusCancelling, Next: core.StatusCancelled}); err != nil {
		t.Fatal(err)
	}
	el := elector(t, testenv.ZKRoot(t)+"/leader", "r1")
	r, err := core.NewRecoverer(l, el, map[core.Kind]core.Driver{core.KindTCC: core.DriverFunc(
		func(context.Context, lock.Token, *core.Transaction) error { return nil })},
		core.WithRetention(time.Nanosecond, "@every 100ms"))
	if err != nil {
		t.Fatal(err)
	}
	run(t, r.Run)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		_, err := l.Get(ctx, "done")
		return errors.Is(err, core.ErrNotFound)
	}, "the finished transaction is purged")
	if tx := get(t, l, "open"); tx.Status != core.StatusTrying || len(tx.Branches) != 2 {
		t.Fatalf("the open transaction: %+v", tx)
	}
	// The branch table has no foreign key to cascade the delete: purge deletes the branches.
	rows, err := s.Pool.Query(ctx, `select gid || '/' || branch from `+pgx.Identifier{s.Name, "txkit_branch"}.Sanitize()+` order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"open/a", "open/b"}; !slices.Equal(left, want) {
		t.Fatalf("branch rows after the purge: %v, want %v", left, want)
	}
	if st := r.Stats(); st.Purged != 1 {
		t.Fatalf("stats %+v, want Purged 1 (transactions, not rows)", st)
	}
}

// A log migrated before the branch table lost its foreign key has it dropped by Migrate, and
// records and finds its transactions as before.
func TestIntegrationMigrateDropsBranchKey(t *testing.T) {
	ctx := t.Context()
	l, s := newLogOn(t, core.WithTablePrefix("old_"))
	global, branch := pgx.Identifier{s.Name, "old_global"}.Sanitize(), pgx.Identifier{s.Name, "old_branch"}.Sanitize()
	keys := func() int {
		t.Helper()
		var n int
		if err := s.Pool.QueryRow(ctx, `select count(*) from pg_constraint where conrelid = $1::regclass and contype = 'f'`,
			branch).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := keys(); n != 0 {
		t.Fatalf("a new branch table has %d foreign keys, want 0", n)
	}
	// The table as the schema created it before, in a deployment older than the record of the
	// schema's versions.
	if _, err := s.Pool.Exec(ctx, `alter table `+branch+` add foreign key (gid) references `+global+` (gid) on delete cascade;
		delete from `+pgx.Identifier{s.Name, pgutil.MigrationsTable}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if n := keys(); n != 1 {
		t.Fatalf("after adding the old key: %d foreign keys, want 1", n)
	}
	// Two processes migrating at once both find the key; both must pass.
	var eg errgroup.Group
	for range 2 {
		eg.Go(func() error { return l.Migrate(ctx) })
	}
	if err := eg.Wait(); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if n := keys(); n != 0 {
		t.Fatalf("after Migrate: %d foreign keys, want 0", n)
	}
	if err := l.Create(ctx, "g", core.KindTCC, time.Hour, nil, httpBranch("a")); err != nil {
		t.Fatal(err)
	}
	if tx := get(t, l, "g"); len(tx.Branches) != 1 || tx.Branches[0].Name != "a" {
		t.Fatalf("after Migrate: %+v", tx)
	}
}

func TestIntegrationRecovererOptions(t *testing.T) {
	l := newLog(t)
	el := elector(t, testenv.ZKRoot(t)+"/leader", "r1")
	d := map[core.Kind]core.Driver{core.KindTCC: core.DriverFunc(func(context.Context, lock.Token, *core.Transaction) error { return nil })}
	tests := []struct {
		name    string
		l       *core.Log
		el      lock.Elector
		drivers map[core.Kind]core.Driver
		opts    []core.RecoverOption
	}{
		{"nil log", nil, el, d, nil},
		{"nil elector", l, nil, d, nil},
		{"no driver", l, el, nil, nil},
		{"bad kind", l, el, map[core.Kind]core.Driver{9: d[core.KindTCC]}, nil},
		{"schedule", l, el, d, []core.RecoverOption{core.WithSchedule("every second")}},
		{"batch", l, el, d, []core.RecoverOption{core.WithBatchSize(0)}},
		{"concurrency", l, el, d, []core.RecoverOption{core.WithConcurrency(-1)}},
		{"retention", l, el, d, []core.RecoverOption{core.WithRetention(0, "@every 1m")}},
		{"logger", l, el, d, []core.RecoverOption{core.WithLogger(nil)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := core.NewRecoverer(tc.l, tc.el, tc.drivers, tc.opts...); !errors.Is(err, core.ErrInvalidOption) {
				t.Fatalf("NewRecoverer = %v, want ErrInvalidOption", err)
			}
		})
	}
}

// A saga records its steps with the transaction in one statement; a finish marks only the
// branches done, so steps never run stay pending.
func TestIntegrationCreateWithBranches(t *testing.T) {
	ctx := t.Context()
	l := newLog(t)
	steps := []core.Branch{httpBranch("a"), httpBranch("b"), httpBranch("c")}
	for i := range steps {
		steps[i].Seq = i
		steps[i].Payload = []byte(`{"step":"` + steps[i].Name + `"}`)
	}
	steps[2].Payload = nil
	if err := l.Create(ctx, "s1", core.KindSaga, time.Minute, []byte(`{}`), steps...); err != nil {
		t.Fatalf("Create with branches: %v", err)
	}
	tx := get(t, l, "s1")
	if tx.Status != core.StatusRunning || len(tx.Branches) != 3 {
		t.Fatalf("created: %+v", tx)
	}
	for i, b := range tx.Branches {
		if b.Name != steps[i].Name || b.Seq != i || b.Status != core.BranchPending || string(b.Payload) != string(steps[i].Payload) {
			t.Fatalf("branch %d: %+v", i, b)
		}
	}
	tests := []struct {
		name string
		gid  string
		bs   []core.Branch
		want error
	}{
		{"gid exists", "s1", []core.Branch{httpBranch("x")}, core.ErrInvalidState},
		{"empty name", "s2", []core.Branch{{Target: core.Target{Kind: core.TargetInProc, Ref: "x"}}}, core.ErrInvalidBranch},
		{"no target", "s2", []core.Branch{{Name: "x"}}, core.ErrInvalidBranch},
		{"duplicate", "s2", []core.Branch{httpBranch("x"), httpBranch("x")}, core.ErrInvalidBranch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := l.Create(ctx, tc.gid, core.KindSaga, time.Minute, nil, tc.bs...); !errors.Is(err, tc.want) {
				t.Fatalf("Create = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := l.Get(ctx, "s2"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("a refused Create left s2 behind: %v", err)
	}

	// Progress of a drive that goes on: a is done, the lease renewed, no attempt counted.
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "s1", From: core.StatusRunning, Done: []string{"a"}, Renew: true}); err != nil {
		t.Fatalf("Record progress: %v", err)
	}
	renewed := get(t, l, "s1")
	if renewed.Status != core.StatusRunning || renewed.Attempts != 0 || renewed.LastError != "" ||
		renewed.Branches[0].Status != core.BranchSucceeded || renewed.Branches[1].Status != core.BranchPending ||
		!renewed.NextRetryAt.After(renewed.UpdatedAt.Add(time.Second)) || !renewed.UpdatedAt.After(tx.UpdatedAt) {
		t.Fatalf("after progress: %+v", renewed)
	}
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "nope", From: core.StatusRunning, Renew: true}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("progress of an unknown gid = %v, want ErrNotFound", err)
	}

	// a succeeded, b refused: compensating; b and a compensated, c never ran and stays pending.
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "s1", From: core.StatusRunning, Done: []string{"a"},
		Failed: []core.BranchFailure{{Branch: "b", Err: errors.New("refused")}}, Next: core.StatusCompensating}); err != nil {
		t.Fatalf("Record compensating: %v", err)
	}
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "s1", From: core.StatusCompensating, Done: []string{"b", "a"},
		Next: core.StatusCompensated}); err != nil {
		t.Fatalf("Record compensated: %v", err)
	}
	tx = get(t, l, "s1")
	want := []core.BranchStatus{core.BranchCompensated, core.BranchCompensated, core.BranchPending}
	for i, b := range tx.Branches {
		if b.Status != want[i] {
			t.Fatalf("branch %s is %s, want %s", b.Name, b.Status, want[i])
		}
	}
	if tx.Status != core.StatusCompensated || tx.Branches[1].Attempts != 1 {
		t.Fatalf("finished: %+v", tx)
	}
}

// A finish to confirmed, cancelled or succeeded changes the transaction's row only: every branch
// is done then, and Get reports each in the implied status, as of the finish (a branch marked
// done before keeps its own time). Compensated implies nothing (steps that never ran stay
// pending; TestIntegrationCreateWithBranches), so its finish marks its branches. The same holds
// for a leader's fenced finish and with group commit.
func TestIntegrationFinishImpliesBranches(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			ctx := t.Context()
			s := testenv.PG(t)
			var opts []core.LogOption
			if group {
				opts = append(opts, core.WithGroupCommit(time.Millisecond))
			}
			l, err := core.New(s.Pool, append(opts, core.WithSchema(s.Name))...)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			el, err := elector(t, testenv.ZKRoot(t)+"/leader", "leader").Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer el.Resign(context.WithoutCancel(ctx)) //nolint:errcheck
			stored := func(gid string) map[string]string {
				rows, err := s.Pool.Query(ctx, `select branch, status from txkit_branch where gid = $1`, gid)
				if err != nil {
					t.Fatal(err)
				}
				m := map[string]string{}
				var b, st string
				if _, err := pgx.ForEachRow(rows, []any{&b, &st}, func() error { m[b] = st; return nil }); err != nil {
					t.Fatal(err)
				}
				return m
			}
			for _, tc := range []struct {
				gid       string
				kind      core.Kind
				from, to  core.Status
				tok       lock.Token
				earlier   string // marked done by a progress record before the finish
				rows      string // the stored status of the other branches after it
				implied   core.BranchStatus
				impliedOK bool
			}{
				{"confirmed", core.KindTCC, core.StatusConfirming, core.StatusConfirmed, lock.Token{}, "", "pending", core.BranchConfirmed, true},
				{"cancelled-by-leader", core.KindTCC, core.StatusCancelling, core.StatusCancelled, el.Token(), "", "pending", core.BranchCancelled, true},
				{"succeeded", core.KindSaga, core.StatusRunning, core.StatusSucceeded, lock.Token{}, "a", "pending", core.BranchSucceeded, true},
				{"compensated", core.KindSaga, core.StatusCompensating, core.StatusCompensated, lock.Token{}, "", "compensated", core.BranchCompensated, false},
			} {
				if err := l.CreateIn(ctx, tc.gid, tc.kind, tc.from, time.Minute, nil, httpBranch("a"), httpBranch("b")); err != nil {
					t.Fatal(err)
				}
				if tc.earlier != "" {
					if err := l.Record(ctx, lock.Token{}, core.Progress{GID: tc.gid, From: tc.from, Done: []string{tc.earlier}, Renew: true}); err != nil {
						t.Fatal(err)
					}
				}
				before := get(t, l, tc.gid)
				if err := l.Record(ctx, tc.tok, core.Progress{GID: tc.gid, From: tc.from, Done: []string{"a", "b"}, Next: tc.to}); err != nil {
					t.Fatalf("%s: Record: %v", tc.gid, err)
				}
				if implied, ok := tc.to.BranchesImplied(); ok != tc.impliedOK || (ok && implied != tc.implied) {
					t.Fatalf("%s.BranchesImplied() = %s, %v", tc.to, implied, ok)
				}
				rows := stored(tc.gid)
				if rows["b"] != tc.rows {
					t.Fatalf("%s: stored branches %v, want b %s", tc.gid, rows, tc.rows)
				}
				tx := get(t, l, tc.gid)
				if tx.Status != tc.to {
					t.Fatalf("%s: status %s", tc.gid, tx.Status)
				}
				for i, b := range tx.Branches {
					if b.Status != tc.implied {
						t.Fatalf("%s: branch %s reported %s, want %s", tc.gid, b.Name, b.Status, tc.implied)
					}
					switch {
					case b.Name == tc.earlier:
						if !b.UpdatedAt.Equal(before.Branches[i].UpdatedAt) {
							t.Fatalf("%s: branch %s done earlier reports %v, want its own %v", tc.gid, b.Name, b.UpdatedAt, before.Branches[i].UpdatedAt)
						}
					case tc.impliedOK && !b.UpdatedAt.Equal(tx.UpdatedAt):
						t.Fatalf("%s: branch %s reports %v, want the finish's %v", tc.gid, b.Name, b.UpdatedAt, tx.UpdatedAt)
					}
				}
			}
		})
	}
}

// A two-phase commit recorded as voting (vote markers) is due for the leader like a decided one,
// and the claim hands it over still voting though its timeout has passed: the votes decide, not
// the clock. Other kinds cannot be recorded so. Unfinished tells it from finished and unknown gids.
func TestIntegrationVotingRecord(t *testing.T) {
	ctx := t.Context()
	l := newLog(t, core.WithLease(200*time.Millisecond))
	if err := l.CreateIn(ctx, "tcc", core.KindTCC, core.StatusVoting, time.Hour, nil, httpBranch("a")); !errors.Is(err, core.ErrInvalidState) {
		t.Fatalf("CreateIn(tcc, voting) = %v, want ErrInvalidState", err)
	}
	for _, gid := range []string{"voting", "done"} {
		if err := l.CreateIn(ctx, gid, core.Kind2PC, core.StatusVoting, time.Millisecond, nil, httpBranch("a"), httpBranch("b")); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "done", From: core.StatusVoting, Next: core.StatusConfirmed}); err != nil {
		t.Fatal(err)
	}
	open, err := l.Unfinished(ctx, []string{"voting", "done", "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || !open["voting"] {
		t.Fatalf("Unfinished = %v, want only voting", open)
	}
	if tx := get(t, l, "done"); tx.Status != core.StatusConfirmed || tx.Branches[0].Status != core.BranchConfirmed {
		t.Fatalf("done: %+v", tx)
	}
	seen := make(chan core.Status, 10)
	el := elector(t, testenv.ZKRoot(t)+"/leader", "r1")
	r, err := core.NewRecoverer(l, el, map[core.Kind]core.Driver{core.Kind2PC: core.DriverFunc(
		func(_ context.Context, _ lock.Token, tx *core.Transaction) error {
			seen <- tx.Status
			return errors.New("not yet")
		})})
	if err != nil {
		t.Fatal(err)
	}
	run(t, r.Run)
	select {
	case st := <-seen:
		if st != core.StatusVoting {
			t.Fatalf("the driver got the transaction %s, want voting (its timeout passed long ago)", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader did not drive the voting transaction")
	}
	if st := get(t, l, "voting").Status; st != core.StatusVoting {
		t.Fatalf("after a drive: %s, want voting", st)
	}
}

// A process starting beside others that write to the log migrates without waiting for their
// transactions (pgutil.MigrateOnce): the schema's version is recorded, so it only reads.
func TestIntegrationMigrateBesideWriters(t *testing.T) {
	ctx := t.Context()
	l, s := newLogOn(t)
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `insert into txkit_global (gid, kind, status, timeout_at, next_retry_at) values ('w', 'tcc', 'trying', now(), now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `insert into txkit_branch (gid, branch, seq, target_kind, target, status) values ('w', 'a', 0, 'http', 'http://p/a', 'pending')`); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := l.Migrate(short); err != nil {
		t.Fatalf("Migrate beside an open writer: %v", err)
	}
}

// Run whose ctx ends while it starts (before or during its first statement) returns nil, as it
// does when ctx ends while it runs: a caller that cancels its own Run sees no error.
func TestIntegrationRecovererRunCancelledAtStart(t *testing.T) {
	l := newLog(t)
	el := elector(t, testenv.ZKRoot(t)+"/leader", "r1")
	for _, after := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond} {
		r, err := core.NewRecoverer(l, el, map[core.Kind]core.Driver{core.KindTCC: &recorder{l: l, drives: map[string]int{}}},
			core.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), after)
		err = r.Run(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Run with ctx ended after %v = %v, want nil", after, err)
		}
	}
}
