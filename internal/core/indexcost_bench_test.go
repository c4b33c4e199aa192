package core_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// BenchmarkIndexCost measures what each secondary index of the log's global table (the leader's
// due index, the retention's done index) and of the barrier's marker table (the retention's
// expiry index) costs the writes that maintain it: the WAL records and bytes, and the execution
// time, that pg_stat_statements counts for each statement of b.N TCC transactions of 3 branches
// — the record with its branches, the decision, the finish, and each participant's try and
// confirm markers — in a schema of their own with every index, and in one without each index.
// WAL records do not depend on the machine's load (bytes do a little: full-page images after a
// checkpoint, counted apart); times do. Needs pg_stat_statements (loaded by deploy/local/postgres);
// logs each statement's figures and reports each variant's per transaction.
//
//	go test -run '^$' -bench IndexCost -benchtime 300x ./internal/core/
func BenchmarkIndexCost(b *testing.B) {
	admin := testenv.PG(b).Pool
	ns := statStatements(b, admin) // the extension's schema
	for _, v := range []struct{ name, drop string }{
		{"every index", ""},
		{"without txkit_global_due", "txkit_global_due"},
		{"without txkit_global_done", "txkit_global_done"},
		{"without the marker expiry index", "txkit_barrier_expires_at_idx"},
	} {
		b.Run(strings.ReplaceAll(v.name, " ", "-"), func(b *testing.B) { indexCost(b, admin, ns, v.drop) })
	}
}

// indexCost is BenchmarkIndexCost in a schema of its own, without the index drop (none: "").
func indexCost(b *testing.B, admin *pgxpool.Pool, ns, drop string) {
	ctx := b.Context()
	s := testenv.PG(b)
	{
		l, err := core.New(s.Pool, core.WithSchema(s.Name))
		if err != nil {
			b.Fatal(err)
		}
		br, err := barrier.New(s.Pool, barrier.WithTable(s.Name, "txkit_barrier"))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		if err := br.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		if drop != "" {
			if _, err := s.Pool.Exec(ctx, "drop index "+pgx.Identifier{s.Name, drop}.Sanitize()); err != nil {
				b.Fatal(err)
			}
		}
		mark := func(gid, branch string, op participant.Op) error {
			return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
				return br.Call(ctx, tx, participant.Request{GID: gid, Branch: branch, Op: op}, func(context.Context, pgx.Tx) error { return nil })
			})
		}
		names := []string{"a", "b", "c"}
		b.ResetTimer()
		for range b.N {
			gid := uuid.NewString() // one length in every variant: the WAL bytes compare
			if err := l.CreateIn(ctx, gid, core.KindTCC, core.StatusTrying, time.Minute, nil, httpBranch("a"), httpBranch("b"), httpBranch("c")); err != nil {
				b.Fatal(err)
			}
			for _, n := range names {
				if err := mark(gid, n, participant.OpTry); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := l.Decide(ctx, gid, core.StatusTrying, core.StatusConfirming); err != nil {
				b.Fatal(err)
			}
			for _, n := range names {
				if err := mark(gid, n, participant.OpConfirm); err != nil {
					b.Fatal(err)
				}
			}
			if err := l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusConfirming, Next: core.StatusConfirmed}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		// The statements of this schema only: their text names it.
		var table strings.Builder
		var bytes, recs, fpi, total float64 // summed over the statements
		rows, err := admin.Query(ctx, `select query, calls, wal_records, wal_fpi, wal_bytes, mean_exec_time from `+pgx.Identifier{ns, "pg_stat_statements"}.Sanitize()+`
			where query like '%' || $1 || '%' and query ~ '"txkit_(global|branch|barrier)"' and query ~* '^\s*(insert|update|with)' and calls >= $2 order by query`, s.Name, b.N)
		if err != nil {
			b.Fatal(err)
		}
		var (
			q                    string
			calls, records, fpis int64
			walBytes, execMS     float64
		)
		_, err = pgx.ForEachRow(rows, []any{&q, &calls, &records, &fpis, &walBytes, &execMS}, func() error {
			what := strings.Join(strings.Fields(strings.ReplaceAll(q, pgx.Identifier{s.Name}.Sanitize()+".", "")), " ")
			fmt.Fprintf(&table, "  %6.2f WAL records %6.0f bytes %.3f ms per call, %.1f calls per transaction: %.70s\n",
				float64(records)/float64(calls), walBytes/float64(calls), execMS, float64(calls)/float64(b.N), what)
			bytes += walBytes
			recs += float64(records)
			fpi += float64(fpis)
			total += execMS * float64(calls) / float64(b.N)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if b.N > 1 { // not the probe run
			b.Logf("\n%s", table.String())
		}
		b.ReportMetric(recs/float64(b.N), "wal-records/tx")
		b.ReportMetric(fpi/float64(b.N), "wal-fpi/tx")
		b.ReportMetric(bytes/float64(b.N), "wal-bytes/tx")
		b.ReportMetric(total, "exec-ms/tx")
	}
}
