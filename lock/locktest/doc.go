// Package locktest is the conformance suite of the [lock.Locker] and [lock.Elector] contract: the
// tests every lock backend (ZooKeeper, PostgreSQL, Redis, Redlock, or one of your own) must pass,
// run against the real server.
//
// A backend describes itself with a [Backend]: how to open one process's connection to the
// server ([Backend.Connect], returning a [Conn] that makes Lockers and Electors), how long a dead
// holder keeps others out ([Backend.Expiry]), and the configuration string from which worker
// processes rebuild the same Backend ([Backend.Config]). [Run] then runs, as subtests:
//
//   - Exclusion: goroutines, each with its own Locker, over several connections, take turns;
//     never two holders at once, tokens strictly rising.
//   - Reentrancy: holds of one Locker are counted and share one Lease; the last Unlock releases.
//   - TryLock: an error wrapping [lock.ErrLocked] while another owner holds the lock.
//   - CancelLeavesNothing: a Lock whose ctx ends while waiting leaves nothing behind.
//   - UnlockNotHeld: Unlock of a Locker that holds nothing returns nil and releases no one.
//   - Tokens: every hold's token is higher than every earlier hold's.
//   - Released and Lost: a Lease's Done, Context and Err when it is released, and when its
//     connection is closed under it (then Done comes no later than the next holder).
//   - Partition: a holder is cut off from the server (every packet lost, no connection closed),
//     so it can neither renew nor release: its Lease ends before another owner gets in, and
//     that owner gets in within [Backend.Expiry] + 1 s. When the network comes back, the cut-off
//     Locker refuses to Lock until its lost hold is unlocked, and that Unlock leaves the newer
//     hold alone (only when [Backend.ConnectVia] is set).
//   - Elector: Campaign, Leader, Resign, RunWhileLeader and the handoff between candidates
//     (only when [Conn.Elector] is set).
//   - Inspector: the Conn's [lock.Inspector] lists nobody on a free lock, the holder with its
//     Lease's token (and a leader with its candidate id), the waiters in queue order with the
//     tokens they then get when the backend knows its waiters (ZooKeeper's fair recipe), only the
//     holder otherwise, and nobody after the last Unlock; the empty name is an error wrapping
//     [lock.ErrInvalidOption]; an ended ctx ends the call (only when [Conn.Inspector] is set).
//   - Counter: 4 worker processes × 16 goroutines increment a counter in PostgreSQL with a read
//     and a write in separate statements outside any transaction, so only the lock keeps updates
//     from being lost; no update is lost, every value is written once, and the tokens that wrote
//     them rise in value order ([RunCounter]).
//   - HolderKilled and LeaderKilled: the process holding the lock (leading the election) is
//     SIGKILLed; another holder gets in within [Backend.Expiry] + 1 s ([RunHolderKilled],
//     [RunLeaderKilled]). The figures are logged.
//
// The multi-process tests run the test binary again as a worker process. The package's TestMain
// hands workers to [RunWorker] before anything else, with a function that builds the Backend from
// its name and configuration (the same one the tests use):
//
//	func TestMain(m *testing.M) {
//		if locktest.IsWorker() {
//			os.Exit(locktest.RunWorker(newBackend))
//		}
//		os.Exit(m.Run())
//	}
//
//	// newBackend builds the backend called name on the server described by config.
//	func newBackend(name, config string) (locktest.Backend, error) {
//		return locktest.Backend{Name: name, Config: config, Expiry: ttl,
//			Connect: func(ctx context.Context) (*locktest.Conn, error) {
//				c, err := mylock.Dial(ctx, config, mylock.WithTTL(ttl))
//				if err != nil {
//					return nil, err
//				}
//				return &locktest.Conn{
//					Locker:  func(name string) (lock.Locker, error) { return c.NewMutex(name) },
//					Elector: func(name, id string) (lock.Elector, error) { return c.NewElector(name, id) },
//					Close:   c.Close,
//				}, nil
//			}}, nil
//	}
//
//	func TestIntegrationConformance(t *testing.T) {
//		b, err := newBackend("mylock", serverURL(t))
//		if err != nil {
//			t.Fatal(err)
//		}
//		locktest.Run(t, b)
//	}
//
// The suite needs a PostgreSQL server for the counter, named by TXKIT_PG_URL (as every txkit
// integration test does; `make up` starts one), and works in a schema of its own there. Its tests
// are integration tests: under -short they are skipped. Each gives the Lockers it makes a lock
// name of its own (lower-case letters, digits and dashes, at most 49 characters); the backend
// maps it into its namespace (a ZooKeeper path, a key prefix, a schema), which [Backend.Config]
// should make unique to the test. With a 2-3 s expiry, [Run] takes 10-20 s per backend here
// (most of it the expiry waits and the counter), longer when a backend hands the lock over slowly
// under 64 contenders (Redlock's counter took 88 s).
//
// [History] is the in-process exclusion check of the Exclusion subtest, for tests of your own.
package locktest
