package core_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

// BenchmarkRecordShape measures what shapes of the statement that records a transaction with its
// branches (the log's create_with_branches: a saga's record with its 3 steps, 2PC's with its 2
// branches) cost PostgreSQL and the Go process, each on scratch tables in a schema of its own, one
// connection each, the variants interleaved record by record so that the machine's load falls on
// all alike. Per record: the CPU time of the variant's backend (/proc/<pid>/schedstat: the server
// must run on this machine), the statement's execution time and WAL (pg_stat_statements), the
// round trip with its commit (wall time, p50 and p25), the Go allocations. The variants: unnest6,
// the CTE over unnest of six arrays with a ::jsonb cast of each row's call options (the shape
// before); unnest5, the same without the call options; values and values6, a multi-row VALUES of
// scalar parameters without and with the call options (the shape now, values6); C-* and icu-*,
// unnest6 on tables whose text keys (gid, branch) are collate "C" or collate "en-US-x-icu" (a
// stand-in for a database in en_US.UTF-8: the dev server has no libc en_US locale; the others are
// in the database's, C.UTF-8 here); packed, a prototype of another data model — the steps in arrays
// of the transaction's own row, one heap tuple and two index entries — which the log does not have.
//
//	go test -run '^$' -bench RecordShape -benchtime 3000x ./internal/core/
func BenchmarkRecordShape(b *testing.B) {
	admin := testenv.PG(b).Pool
	ns := statStatements(b, admin)
	for _, nb := range []int{3, 2} {
		b.Run(fmt.Sprintf("%d-branches", nb), func(b *testing.B) {
			var vs []*shapeVariant
			for _, v := range []struct{ name, coll, shape string }{
				{"unnest6", "", "unnest6"},
				{"unnest5", "", "unnest5"},
				{"values", "", "values"},
				{"values6", "", "values6"},
				{"C-unnest6", `collate "C"`, "unnest6"},
				{"icu-unnest6", `collate "en-US-x-icu"`, "unnest6"},
				{"packed", "", "packed"},
			} {
				vs = append(vs, newShape(b, v.name, nb, v.coll, v.shape))
			}
			for _, v := range vs {
				v.allocs = testing.AllocsPerRun(100, v.record)
				v.cpu0 = v.backendCPU(b)
			}
			before := make([]shapeStats, len(vs))
			for i, v := range vs {
				before[i] = v.stats(b, admin, ns)
			}
			b.ResetTimer()
			for n := range b.N {
				for k := range vs {
					v := vs[(n+k)%len(vs)]
					t := time.Now()
					v.record()
					v.walls = append(v.walls, time.Since(t))
				}
			}
			b.StopTimer()
			var out strings.Builder
			for i, v := range vs {
				a := v.stats(b, admin, ns)
				c := float64(a.calls - before[i].calls)
				cpu := float64(v.backendCPU(b)-v.cpu0) / 1000 / float64(b.N)
				slices.Sort(v.walls)
				fmt.Fprintf(&out, "  %-14s backend CPU %5.1f us  exec mean %5.1f us min %5.1f  wall p50 %6.1f us p25 %6.1f  WAL %5.2f records %6.0f B (fpi %.2f)  Go %4.0f allocs\n", v.name, cpu,
					(a.ms-before[i].ms)*1000/c, a.min*1000, float64(v.walls[len(v.walls)/2].Microseconds()), float64(v.walls[len(v.walls)/4].Microseconds()),
					float64(a.recs-before[i].recs)/c, (a.bytes-before[i].bytes)/c, float64(a.fpi-before[i].fpi)/c, v.allocs)
			}
			if b.N > 1 { // not the probe run
				b.Logf("\n%s", out.String())
			}
		})
	}
}

// statStatements returns the schema of the pg_stat_statements extension, or skips b.
func statStatements(b *testing.B, admin *pgxpool.Pool) string {
	var ns string
	if err := admin.QueryRow(b.Context(), `select extnamespace::regnamespace::text from pg_extension where extname = 'pg_stat_statements'`).Scan(&ns); err != nil {
		b.Skipf("pg_stat_statements is not installed: %v", err)
	}
	return ns
}

type shapeVariant struct {
	name   string
	s      *testenv.Schema
	record func()
	walls  []time.Duration
	allocs float64
	pid    int   // its backend (one connection)
	cpu0   int64 // its CPU time before, ns
}

// backendCPU is the CPU time v's backend has run, in ns (/proc/<pid>/schedstat: the server is
// on this machine).
func (v *shapeVariant) backendCPU(b *testing.B) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", v.pid))
	if err != nil {
		b.Skipf("the backend's CPU time: %v (PostgreSQL on another machine?)", err)
	}
	n, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

type shapeStats struct {
	calls, recs, fpi int64
	bytes, ms, min   float64
}

func (v *shapeVariant) stats(b *testing.B, admin *pgxpool.Pool, ns string) (s shapeStats) {
	err := admin.QueryRow(b.Context(), `select coalesce(sum(calls), 0)::int8, coalesce(sum(wal_records), 0)::int8, coalesce(sum(wal_fpi), 0)::int8,
		coalesce(sum(wal_bytes), 0)::float8, coalesce(sum(total_exec_time), 0)::float8, coalesce(min(min_exec_time), 0)::float8
		from `+pgx.Identifier{ns, "pg_stat_statements"}.Sanitize()+` where query like '%' || $1 || '%' and query ~* '^\s*(insert|with)'`,
		v.s.Name).Scan(&s.calls, &s.recs, &s.fpi, &s.bytes, &s.ms, &s.min)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func newShape(b *testing.B, name string, nb int, coll, shape string) *shapeVariant {
	ctx := b.Context()
	s := testenv.PG(b)
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 1, 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var pid int
	if err := pool.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	q := pgx.Identifier{s.Name}.Sanitize() + "."
	global, branch := q+"txkit_global", q+"txkit_branch"
	ddl := `create table ` + global + ` (
    gid text ` + coll + ` primary key, kind text not null, status text not null, timeout_at timestamptz not null,
    next_retry_at timestamptz not null, attempts integer not null default 0, last_error text, payload bytea,
    created_at timestamptz not null default now(), updated_at timestamptz not null default now(),
    trace_context text, abort_cause text,
    names text[], seqs int[], target_kinds text[], targets text[], payloads bytea[], statuses text[]);
create index on ` + global + ` (next_retry_at) where status not in ('committed', 'rolled_back');
create index on ` + global + ` (updated_at) where status in ('committed', 'rolled_back');
create table ` + branch + ` (
    gid text ` + coll + ` not null, branch text ` + coll + ` not null, seq integer not null, target_kind text not null,
    target text not null, payload bytea, status text not null, attempts integer not null default 0, last_error text,
    primary key (gid, branch));
alter table ` + branch + ` add column updated_at timestamptz not null default now();
alter table ` + branch + ` add column refusal text;
alter table ` + branch + ` add column call_options jsonb;`
	if _, err := s.Pool.Exec(ctx, ddl); err != nil {
		b.Fatal(err)
	}
	head := `insert into ` + global + ` (gid, kind, status, timeout_at, next_retry_at, payload, trace_context)
    values ($1, $2, $3, now() + make_interval(secs => $4::float8), now() + make_interval(secs => $5::float8), $6, nullif($7, ''))`
	names, seqs, kinds, refs, payloads, opts := make([]string, nb), make([]int32, nb), make([]string, nb), make([]string, nb), make([][]byte, nb), make([]*string, nb)
	for i := range nb {
		names[i], seqs[i], kinds[i], refs[i] = fmt.Sprintf("b%d-c%d", i, 7), int32(i), "http", fmt.Sprintf("http://127.0.0.1:4%04d/", i)
	}
	var sql string
	var args func(gid string) []any
	switch shape {
	case "unnest6", "unnest5":
		sql = `with g as (` + head + ` returning gid)
insert into ` + branch + ` (gid, branch, seq, target_kind, target, payload, status, call_options)
select g.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, 'pending', b.call_options::jsonb
from g, unnest($8::text[], $9::int[], $10::text[], $11::text[], $12::bytea[], $13::text[])
    as b(branch, seq, target_kind, target, payload, call_options)`
		args = func(gid string) []any {
			return []any{gid, "saga", "running", 60.0, 30.0, []byte(`{}`), "", names, seqs, kinds, refs, payloads, opts}
		}
		if shape == "unnest5" {
			sql = `with g as (` + head + ` returning gid)
insert into ` + branch + ` (gid, branch, seq, target_kind, target, payload, status)
select g.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, 'pending'
from g, unnest($8::text[], $9::int[], $10::text[], $11::text[], $12::bytea[])
    as b(branch, seq, target_kind, target, payload)`
			args = func(gid string) []any {
				return []any{gid, "saga", "running", 60.0, 30.0, []byte(`{}`), "", names, seqs, kinds, refs, payloads}
			}
		}
	case "values6":
		var rows []string
		for i := range nb {
			n := 8 + 6*i
			rows = append(rows, fmt.Sprintf("($%d::text, $%d::int, $%d::text, $%d::text, $%d::bytea, $%d::text::jsonb)", n, n+1, n+2, n+3, n+4, n+5))
		}
		sql = `with g as (` + head + ` returning gid)
insert into ` + branch + ` (gid, branch, seq, target_kind, target, payload, status, call_options)
select g.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, 'pending', b.call_options
from g, (values ` + strings.Join(rows, ", ") + `) as b(branch, seq, target_kind, target, payload, call_options)`
		args = func(gid string) []any {
			a := []any{gid, "saga", "running", 60.0, 30.0, []byte(`{}`), ""}
			for i := range nb {
				a = append(a, names[i], seqs[i], kinds[i], refs[i], payloads[i], opts[i])
			}
			return a
		}
	case "values":
		var rows []string
		for i := range nb {
			n := 8 + 5*i
			rows = append(rows, fmt.Sprintf("($%d::text, $%d::int, $%d::text, $%d::text, $%d::bytea)", n, n+1, n+2, n+3, n+4))
		}
		sql = `with g as (` + head + ` returning gid)
insert into ` + branch + ` (gid, branch, seq, target_kind, target, payload, status)
select g.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, 'pending'
from g, (values ` + strings.Join(rows, ", ") + `) as b(branch, seq, target_kind, target, payload)`
		args = func(gid string) []any {
			a := []any{gid, "saga", "running", 60.0, 30.0, []byte(`{}`), ""}
			for i := range nb {
				a = append(a, names[i], seqs[i], kinds[i], refs[i], payloads[i])
			}
			return a
		}
	case "packed":
		sql = `insert into ` + global + ` (gid, kind, status, timeout_at, next_retry_at, payload, trace_context,
    names, seqs, target_kinds, targets, payloads, statuses)
    values ($1, $2, $3, now() + make_interval(secs => $4::float8), now() + make_interval(secs => $5::float8), $6, nullif($7, ''),
    $8, $9, $10, $11, $12, array_fill('pending'::text, array[cardinality($8::text[])]))`
		args = func(gid string) []any {
			return []any{gid, "saga", "running", 60.0, 30.0, []byte(`{}`), "", names, seqs, kinds, refs, payloads}
		}
	}
	record := func() {
		if _, err := pool.Exec(ctx, sql, args(uuid.Must(uuid.NewV7()).String())...); err != nil {
			b.Fatal(err)
		}
	}
	for range 200 { // warm: the plan cached, the indexes a few pages deep
		record()
	}
	return &shapeVariant{name: name, s: s, record: record, pid: pid}
}

// BenchmarkRecordEncode measures the Go side of those shapes alone, without a server: pgx's
// encoding of a record's arguments (pgx.ExtendedQueryBuilder, as each Exec of a prepared
// statement does), 3 and 2 branches, as six arrays to unnest or as VALUES rows of scalars.
//
//	go test -run '^$' -bench RecordEncode ./internal/core/
func BenchmarkRecordEncode(b *testing.B) {
	const (
		text, int4, float8, bytea  = pgtype.TextOID, pgtype.Int4OID, pgtype.Float8OID, pgtype.ByteaOID
		textArr, int4Arr, byteaArr = pgtype.TextArrayOID, pgtype.Int4ArrayOID, pgtype.ByteaArrayOID
	)
	for _, nb := range []int{3, 2} {
		names, seqs, kinds, refs, payloads, opts := make([]string, nb), make([]int32, nb), make([]string, nb), make([]string, nb), make([][]byte, nb), make([]*string, nb)
		for i := range nb {
			names[i], seqs[i], kinds[i], refs[i] = fmt.Sprintf("b%d-c%d", i, 7), int32(i), "http", fmt.Sprintf("http://127.0.0.1:4%04d/", i)
		}
		head := []uint32{text, text, text, float8, float8, bytea, text}
		gid := uuid.Must(uuid.NewV7()).String()
		for _, v := range []struct {
			name string
			oids []uint32
			args func() []any
		}{
			{"unnest6", append(head[:6:6], textArr, int4Arr, textArr, textArr, byteaArr, text, textArr), func() []any {
				return []any{gid, "saga", "running", 60.0, 30.0, []byte(`{}`), names, seqs, kinds, refs, payloads, "", opts}
			}},
			{"values6", append(head, slices.Repeat([]uint32{text, int4, text, text, bytea, text}, nb)...), func() []any {
				a := make([]any, 7, 7+6*nb)
				a[0], a[1], a[2], a[3], a[4], a[5], a[6] = gid, "saga", "running", 60.0, 30.0, []byte(`{}`), ""
				for i := range nb {
					a = append(a, names[i], seqs[i], kinds[i], refs[i], payloads[i], opts[i])
				}
				return a
			}},
		} {
			b.Run(fmt.Sprintf("%d-branches/%s", nb, v.name), func(b *testing.B) {
				m := pgtype.NewMap()
				sd := &pgconn.StatementDescription{ParamOIDs: v.oids}
				var eqb pgx.ExtendedQueryBuilder
				b.ReportAllocs()
				for b.Loop() {
					if err := eqb.Build(m, sd, v.args()); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
