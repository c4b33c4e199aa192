// Package app holds what the tcc-order services share: configuration from flags and the
// environment, logging, a database and schema of the run's own, serving HTTP, the order modes
// (TCC, saga), and the participant services (stock, account) with the fault injection the drill
// turns on in them.
package app

// DefaultPG is the PostgreSQL URL of `make up`, used when TXKIT_PG_URL is unset.
const DefaultPG = "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"

// DefaultZK is the ZooKeeper ensemble of `make up`, used when TXKIT_ZK is unset.
const DefaultZK = "127.0.0.1:22181,127.0.0.1:22182,127.0.0.1:22183"
