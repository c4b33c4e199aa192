// Package app holds what the tcc-order services share: configuration from flags and the
// environment, logging, a database and schema of the run's own, serving HTTP, the order modes
// (TCC, saga), and the participant services (stock, account) with the fault injection the drill
// turns on in them.
package app

import (
	"fmt"
	"os"
)

// DefaultPG is the PostgreSQL URL of `make up`, used when TXKIT_PG_URL is unset.
const DefaultPG = "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"

// DefaultZK is the ZooKeeper ensemble of `make up`, used when TXKIT_ZK is unset.
const DefaultZK = "127.0.0.1:22181,127.0.0.1:22182,127.0.0.1:22183"

// EnvSecret names the environment variable holding the HMAC key the order service signs its
// participant calls with and the stock and account services verify them with. The demo harness
// generates one per run; a service started by hand needs it set (at least 16 bytes), e.g.
// export TXKIT_TCC_ORDER_SECRET=$(openssl rand -hex 32).
const EnvSecret = "TXKIT_TCC_ORDER_SECRET"

// minSecretLen is the shortest key participant.NewSigningClient and barrier.WithSecrets
// accept, in bytes.
const minSecretLen = 16

// Secret returns the key in [EnvSecret], or an error saying how to set it.
func Secret() (string, error) {
	s := os.Getenv(EnvSecret)
	problem := "is not set"
	if s != "" {
		if len(s) >= minSecretLen {
			return s, nil
		}
		problem = fmt.Sprintf("is %d bytes, shorter than %d", len(s), minSecretLen)
	}
	return "", fmt.Errorf("%s %s: set it to the secret the order, stock and account services share, "+
		"e.g. export %s=$(openssl rand -hex 32) (the demo generates one)", EnvSecret, problem, EnvSecret)
}
