// Package lockbench holds the benchmarks that compare txkit's lock backends side by side in one
// run, on the servers `make up` starts: ZooKeeper (fair and unfair), PostgreSQL (lease rows and
// advisory locks), Redis and Redlock. `make bench-locks` runs them and prints the table that
// docs/lock.md and the README quote. The package has no code of its own; everything is in its
// tests.
package lockbench
