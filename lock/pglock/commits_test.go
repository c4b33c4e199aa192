package pglock_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
)

// TestIntegrationCommitsPerAcquisition counts the PostgreSQL transactions the lease lock commits
// (concbench.Commits on the Client's pool): uncontended, Lock and Unlock commit one each; with 8
// goroutines passing one lock around (a Mutex each, one Client, as the lock row of
// bench/concbench), the lock commits at most 2 per acquisition — its taking and its release —
// because a waiter whose own Client holds the lock waits for that hold's release instead of
// sending an attempt bound to fail, and that release wakes it directly. An attempt that finds the
// lock held writes nothing.
func TestIntegrationCommitsPerAcquisition(t *testing.T) {
	s, ctx := testenv.Parallel(t, 2*time.Minute)
	var commits concbench.Commits
	app := "pglock-commits-" + testenv.Name(t)
	p := pool(t, s.URL, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = &commits
		cfg.ConnConfig.RuntimeParams["application_name"] = app
	})
	c := client(t, p)
	m := mutex(t, c, "commits")

	// Warm: the first Lock starts the Client's listening connection (on the pool's configuration,
	// so its statements count too), which asks the channel's name once and LISTENs.
	held(t, ctx, m)
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		var listening bool
		err := s.Pool.QueryRow(ctx, `select coalesce(bool_or(query ilike 'listen %'), false)
			from pg_stat_activity where application_name = $1`, app).Scan(&listening)
		return err == nil && listening
	}, "the Client to listen")
	for range 3 {
		n0 := commits.Load()
		held(t, ctx, m)
		n1 := commits.Load()
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		n2 := commits.Load()
		if n1-n0 != 1 || n2-n1 != 1 {
			t.Fatalf("uncontended: Lock committed %d transactions, Unlock %d; want 1 and 1", n1-n0, n2-n1)
		}
	}

	const workers, each = 8, 25
	ms := make([]*pglock.Mutex, workers)
	for i := range ms {
		ms[i] = mutex(t, c, "commits")
	}
	n0 := commits.Load()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := ms[i].Lock(ctx); err != nil {
					errs <- err
					return
				}
				if err := ms[i].Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	per := float64(commits.Load()-n0) / (workers * each)
	t.Logf("%d goroutines × %d acquisitions on one Client: %.2f commits per acquisition (Lock and Unlock)", workers, each, per)
	if per > 2.2 {
		t.Errorf("contended: %.2f commits per acquisition, want at most 2 (+10%% for races with the fallback check)", per)
	}

	// An attempt that finds the lock held writes nothing: it does not even lock the row (an
	// upsert's conflict update whose condition fails still locks it: xmax becomes the attempt's
	// transaction), so its commit needs no WAL flush.
	held(t, ctx, m)
	xmax := func() string { return rowText(t, s, "commits", "xmax") }
	before := xmax()
	if _, err := ms[0].TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while held: %v, want ErrLocked", err)
	}
	if after := xmax(); after != before {
		t.Errorf("the row's xmax went from %s to %s in a failed attempt: the attempt locked the row", before, after)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
