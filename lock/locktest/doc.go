// Package locktest is the conformance suite of the [lock.Locker] and [lock.Elector] contract: the
// tests every lock backend (ZooKeeper, PostgreSQL, Redis, Redlock, or one of your own) must pass,
// run against the real server — exclusion across goroutines and processes, reentrancy, TryLock,
// cancellation, rising tokens, lost and killed holders, the elector and the inspector. A backend
// describes itself with a [Backend] and [Run] runs them as subtests; the multi-process ones run the
// test binary again as a worker, which TestMain hands to [RunWorker]:
//
//	func TestMain(m *testing.M) {
//		if locktest.IsWorker() {
//			os.Exit(locktest.RunWorker(newBackend))
//		}
//		os.Exit(m.Run())
//	}
//
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
// Each subtest, what the suite needs (a PostgreSQL server for the counter, TXKIT_PG_URL) and how
// long it takes: docs/lock.md ("The conformance suite").
package locktest
