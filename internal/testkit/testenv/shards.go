package testenv

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// EnvPGShards names the PostgreSQL servers of the coordinator log's extra shards, after
// TXKIT_PG_URL's (deploy/local/pg-shards): their URLs, separated by commas.
const EnvPGShards = "TXKIT_PG_SHARD_URLS"

// PGShards returns n schemas of the test's own, each on its own PostgreSQL server (process): the
// first on TXKIT_PG_URL's ([PG]), the others on those of TXKIT_PG_SHARD_URLS in order. It fails
// the test when there are fewer than n servers or one does not answer.
func PGShards(t testing.TB, n int) []*Schema {
	t.Helper()
	urls := append([]string{PGURL(t)}, strings.Split(Lookup(t, EnvPGShards), ",")...)
	if len(urls) < n {
		t.Fatalf("%d log shards wanted, %s=%s and %s name %d servers", n, EnvPG, urls[0], EnvPGShards, len(urls))
	}
	out := []*Schema{PG(t)}
	for _, u := range urls[1:n] {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		conn, err := pgx.Connect(ctx, u)
		cancel()
		if err != nil {
			t.Fatalf("PostgreSQL at %s (%s) does not answer (is `make up` running?): %v", u, EnvPGShards, err)
		}
		_ = conn.Close(context.Background())
		out = append(out, schemaOn(t, EnvPGShards, u))
	}
	return out
}
