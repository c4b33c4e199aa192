package idempotency_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// bareDDL is a table equivalent to the Store's: the same columns, key and expiry index, with the
// status and expiry as column defaults so that the bare insert names only the key.
const bareDDL = `create table bare_keys (
    scope       text        not null,
    key         text        not null,
    fingerprint bytea,
    status      text        not null default 'completed' check (status in ('claimed', 'completed')),
    result      bytea,
    created_at  timestamptz not null default now(),
    expires_at  timestamptz not null default now() + interval '7 days',
    primary key (scope, key)
);
create index on bare_keys (expires_at)`

// BenchmarkClaim measures claims per second of a whole transaction — begin, claim a new key,
// commit — through Store.Claim ("txkit") and through a hand-written INSERT ... ON CONFLICT DO
// NOTHING into an equivalent table ("bare"), on the same pool, one transaction at a time.
//
//	go test -run '^$' -bench Claim -count 3 ./idempotency/
func BenchmarkClaim(b *testing.B) {
	s := testenv.PG(b)
	ctx := context.Background()
	st, err := idempotency.New(s.Pool)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, bareDDL); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64 // keys stay new across the benchmark's repeated runs
	claim := map[string]func(tx pgx.Tx, key string) error{
		"txkit": func(tx pgx.Tx, key string) error {
			_, err := st.Claim(ctx, tx, "bench", key)
			return err
		},
		"bare": func(tx pgx.Tx, key string) error {
			_, err := tx.Exec(ctx, `insert into bare_keys (scope, key) values ($1, $2) on conflict do nothing`, "bench", key)
			return err
		},
	}
	for _, name := range []string{"txkit", "bare"} {
		b.Run(name, func(b *testing.B) {
			fn := claim[name]
			for b.Loop() {
				key := "msg-" + strconv.FormatInt(seq.Add(1), 10)
				if err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error { return fn(tx, key) }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
		})
	}
	// ratio alternates the two in blocks, so a change of load on the shared machine weighs on
	// both alike, and reports txkit's claims/s as a fraction of bare's.
	b.Run("ratio", func(b *testing.B) {
		const block = 50
		var spent [2]time.Duration
		for b.Loop() {
			for i, name := range []string{"txkit", "bare"} {
				fn := claim[name]
				start := time.Now()
				for j := 0; j < block; j++ {
					key := "msg-" + strconv.FormatInt(seq.Add(1), 10)
					if err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error { return fn(tx, key) }); err != nil {
						b.Fatal(err)
					}
				}
				spent[i] += time.Since(start)
			}
		}
		b.ReportMetric(float64(spent[1])/float64(spent[0]), "txkit/bare-claims")
	})
}
