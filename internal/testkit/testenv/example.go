package testenv

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ExamplePool connects an Example function to the PostgreSQL of `make up` (TXKIT_PG_URL) and
// returns a pool whose search_path is a schema of the example's own, and a function that drops
// that schema. Examples cannot skip, so a missing server is a panic that says how to start one.
func ExamplePool(ctx context.Context) (*pgxpool.Pool, func()) {
	url := os.Getenv(EnvPG)
	if url == "" {
		panic(EnvPG + " is not set: start the servers with `make up` and run the examples with `make test` " +
			"(or set -a; eval \"$(deploy/local/env)\"; set +a)")
	}
	schema := "example_" + strings.ToLower(rand.Text()[:12])
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		panic(fmt.Sprintf("PostgreSQL at %s=%s does not answer (is `make up` running?): %v", EnvPG, url, err))
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "create schema "+schema); err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, withSearchPath(url, schema))
	if err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			panic(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "drop schema "+schema+" cascade"); err != nil {
			panic(err)
		}
	}
}

// VerifyNoLeaksWithExamples is [VerifyNoLeaks] for a package whose Example functions use
// [ExamplePool]: they run against the real PostgreSQL and cannot skip themselves (without a
// server they panic, naming `make up`), so under -short with no server configured (make unit)
// they are left out, as the TestIntegration tests skip themselves there.
func VerifyNoLeaksWithExamples(m *testing.M) {
	flag.Parse()
	if testing.Short() && os.Getenv(EnvPG) == "" {
		skip := "^Example"
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
			skip = f.Value.String() + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: set -test.skip:", err)
			os.Exit(2)
		}
	}
	VerifyNoLeaks(m)
}
