{{/* The statements of the coordinator log. New renders each once with the quoted table names and
the status names. $n are bind parameters; all times are PostgreSQL's now(). */}}

{{/* Recording a transaction. A lone write ("create", Log.writeOne) is a plain insert: a gid
taken fails it with unique_violation (23505) on the global table, which the log reads as the gid
taken — cheaper on every create than ON CONFLICT's speculative insertion (less WAL, less time) for
a case that is rare. In a batch of several callers' writes ("create_grouped") a failed statement
would refuse the others' too (group commit), so there a gid taken inserts nothing (no row
affected) instead. */}}
{{define "create_row"}}
insert into {{.Global}} (gid, kind, status, timeout_at, next_retry_at, payload, trace_context)
values ($1, $2, $3, now() + make_interval(secs => $4::float8), now() + make_interval(secs => $5::float8), $6, nullif($7, ''))
{{- end}}
{{define "create"}}{{template "create_row" .}}{{end}}
{{define "create_grouped"}}{{template "create_row" .}}
on conflict (gid) do nothing
{{end}}

{{/* The global row and its branches in one statement (a saga's steps, recorded before any runs):
one round trip, and a branch is never there without its transaction or the other way round. A gid
taken records nothing, its branches neither: as "create" (unique_violation) alone, as
"create_grouped" (no row affected) in a batch. */}}
{{define "create_branches_row"}}
with g as (
    insert into {{.Global}} (gid, kind, status, timeout_at, next_retry_at, payload, trace_context)
    values ($1, $2, $3, now() + make_interval(secs => $4::float8), now() + make_interval(secs => $5::float8), $6, nullif($12, ''))
{{- end}}
{{define "create_branches_rest"}}
    returning gid
)
insert into {{.Branch}} (gid, branch, seq, target_kind, target, payload, status, call_options)
select g.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, '{{.BranchPending}}', b.call_options::jsonb
from g, unnest($7::text[], $8::int[], $9::text[], $10::text[], $11::bytea[], $13::text[])
    as b(branch, seq, target_kind, target, payload, call_options)
{{- end}}
{{define "create_with_branches"}}{{template "create_branches_row" .}}{{template "create_branches_rest" .}}{{end}}
{{define "create_with_branches_grouped"}}{{template "create_branches_row" .}}
    on conflict (gid) do nothing{{template "create_branches_rest" .}}{{end}}

{{/* The same for a few branches (up to maxValuesRows: Log.statement), rendered once per count:
the branches as rows of a VALUES list, one scalar parameter per column ($8 on, six per branch), in
place of six arrays to unnest. The same rows, with less for PostgreSQL to do (no array to read per
column, no function scan, no per-row cast of a text[] element) and for pgx to encode: BenchmarkRecordShape
(internal/core). .Rows holds each branch's parameter numbers. */}}
{{define "branch_values"}}(values{{range $i, $r := .Rows}}{{if $i}},{{end}}
    (${{$r.Name}}::text, ${{$r.Seq}}::int, ${{$r.Kind}}::text, ${{$r.Target}}::text, ${{$r.Payload}}::bytea, ${{$r.Opts}}::text::jsonb){{end}})
    as b(branch, seq, target_kind, target, payload, call_options){{end}}
{{define "create_values"}}
with g as (
    {{- template "create_row" .}}
{{- if .Grouped}}
    on conflict (gid) do nothing{{end}}
    returning gid
)
insert into {{.Branch}} (gid, branch, seq, target_kind, target, payload, status, call_options)
select g.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, '{{.BranchPending}}', b.call_options
from g, {{template "branch_values" .}}
{{end}}

{{/* FOR SHARE on the global row conflicts with the update that records a decision, so a branch
is either recorded before the decision (and the decision's driver sees it) or not at all. */}}
{{define "add_branch"}}
insert into {{.Branch}} (gid, branch, seq, target_kind, target, payload, status, call_options)
select g.gid, $2, $3, $4, $5, $6, '{{.BranchPending}}', $8::text::jsonb
from {{.Global}} g where g.gid = $1 and g.status = $7
for share
on conflict (gid, branch) do nothing
returning 1
{{end}}

{{/* Several branches of a transaction in one statement (a TCC Try of several branches): all of
them or none. As add_branch, FOR SHARE on the global row orders them before or after a decision;
none is inserted when one of their names is recorded already. */}}
{{define "add_branches"}}
insert into {{.Branch}} (gid, branch, seq, target_kind, target, payload, status, call_options)
select g.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, '{{.BranchPending}}', b.call_options::jsonb
from (select gid from {{.Global}} where gid = $1 and status = $7 for share) g,
    unnest($2::text[], $3::int[], $4::text[], $5::text[], $6::bytea[], $8::text[])
        as b(branch, seq, target_kind, target, payload, call_options)
where not exists (select 1 from {{.Branch}} x where x.gid = $1 and x.branch = any($2::text[]))
on conflict (gid, branch) do nothing
{{end}}

{{/* The same for a few branches, as VALUES rows from $3 on (see create_values). */}}
{{define "add_values"}}
insert into {{.Branch}} (gid, branch, seq, target_kind, target, payload, status, call_options)
select g.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, '{{.BranchPending}}', b.call_options
from (select gid from {{.Global}} where gid = $1 and status = $2 for share) g,
    {{template "branch_values" .}}
where not exists (select 1 from {{.Branch}} x where x.gid = $1
    and x.branch in ({{range $i, $r := .Rows}}{{if $i}}, {{end}}${{$r.Name}}::text{{end}}))
on conflict (gid, branch) do nothing
{{end}}

{{define "decide"}}
update {{.Global}} set status = $3, attempts = 0, last_error = null, updated_at = now(),
    next_retry_at = now() + make_interval(secs => $4::float8)
where gid = $1 and status = $2
returning 1
{{end}}

{{define "status"}}select status from {{.Global}} where gid = $1{{end}}

{{define "branches_done"}}
update {{.Branch}} set status = $3, updated_at = now()
where gid = $1 and branch = any($2::text[]) and status <> $3
{{end}}

{{/* $4 holds each failure's refusal (null: not one); a refusal also records the transaction's
abort cause. */}}
{{define "branches_failed"}}
with b as (
    update {{.Branch}} as b set attempts = b.attempts + 1, last_error = f.err, refusal = coalesce(f.refusal, b.refusal), updated_at = now()
    from unnest($2::text[], $3::text[], $4::text[]) as f(branch, err, refusal)
    where b.gid = $1 and b.branch = f.branch
)
update {{.Global}} set abort_cause = coalesce(abort_cause, 'refused')
where gid = $1 and exists (select 1 from unnest($4::text[]) as r(refusal) where r.refusal is not null)
{{end}}

{{/* A participant's refusal of branch $2: its reason, and the transaction's abort cause. */}}
{{define "refuse"}}
with b as (
    update {{.Branch}} set refusal = $3, updated_at = now() where gid = $1 and branch = $2
)
update {{.Global}} set abort_cause = coalesce(abort_cause, 'refused') where gid = $1
{{end}}

{{/* A saga moved on past its timeout records why. */}}
{{define "timed_out"}}update {{.Global}} set abort_cause = coalesce(abort_cause, 'timeout') where gid = $1{{end}}

{{/* Moves the transaction on and marks the branches done in the same statement: a clean finish
is one round trip. */}}
{{define "finish"}}
with b as (
    update {{.Branch}} set status = $6, updated_at = now()
    where gid = $1 and branch = any($5::text[]) and status <> $6
)
update {{.Global}} set status = $3, attempts = 0, last_error = null, updated_at = now(),
    next_retry_at = case when $3 = '{{.Trying}}' then timeout_at else now() + make_interval(secs => $4::float8) end
where gid = $1 and status = $2
returning 1
{{end}}

{{/* A driver that goes on after recording progress keeps its lease. */}}
{{define "renew"}}
update {{.Global}} set updated_at = now(), next_retry_at = now() + make_interval(secs => $3::float8)
where gid = $1 and status = $2
returning 1
{{end}}

{{/* After the n-th failed drive the transaction waits d/2 + random()·d/2, d = min(max, min·2^(n-1)). */}}
{{define "reschedule"}}
update {{.Global}} set attempts = attempts + 1, last_error = $3, updated_at = now(),
    next_retry_at = now() + make_interval(secs =>
        least($5::float8, $4::float8 * power(2::float8, least(attempts, 62))) * (0.5 + random() * 0.5))
where gid = $1 and status = $2
returning attempts, next_retry_at
{{end}}

{{/* The leader's claim: due unfinished transactions of its kinds, oldest due first, skipping rows
a starter or another claim holds. A transaction still trying is due only at its timeout
(next_retry_at = timeout_at), and is then decided: cancelling. The claim takes a lease so the next
tick does not take it again while it is driven. */}}
{{define "claim"}}
with due as (
    select gid, status as old_status from {{.Global}}
    where status not in ({{.Finals}}) and kind = any($1::text[]) and next_retry_at <= now()
    order by next_retry_at
    limit $2
    for update skip locked
)
update {{.Global}} as g set
    status        = case when g.status = '{{.Trying}}' and g.timeout_at <= now() then '{{.Cancelling}}' else g.status end,
    attempts      = case when g.status = '{{.Trying}}' and g.timeout_at <= now() then 0 else g.attempts end,
    abort_cause   = case when g.status = '{{.Trying}}' and g.timeout_at <= now() then coalesce(g.abort_cause, 'timeout')
                         else g.abort_cause end,
    next_retry_at = case when g.status = '{{.Trying}}' and g.timeout_at > now() then g.timeout_at
                         else now() + make_interval(secs => $3::float8) end,
    updated_at    = now()
from due where g.gid = due.gid
returning g.gid, g.kind, g.status, g.timeout_at, g.next_retry_at, g.attempts, coalesce(g.last_error, ''),
    g.payload, g.created_at, g.updated_at, coalesce(g.trace_context, ''), due.old_status <> g.status
{{end}}

{{/* The leader's measure of its backlog, once per recovery pass: per kind, the unfinished
transactions due now and the age in seconds of the oldest unfinished one. It reads the rows of the
due index, which holds only unfinished transactions. */}}
{{define "backlog"}}
select kind, count(*) filter (where next_retry_at <= now()),
    coalesce(extract(epoch from now() - min(created_at)), 0)::float8
from {{.Global}}
where status not in ({{.Finals}}) and kind = any($1::text[])
group by kind
{{end}}

{{define "get"}}
select gid, kind, status, timeout_at, next_retry_at, attempts, coalesce(last_error, ''), payload, created_at, updated_at,
    coalesce(trace_context, ''), coalesce(abort_cause, '')
from {{.Global}} where gid = $1
{{end}}

{{/* In byte order (collate "C"), whatever the database's collation: the cursor $3 is the last gid
of a page that callers (the admin API) merge across logs in Go's byte order; paged in an ICU or
libc collation, rows between the two orders were skipped. */}}
{{define "list"}}
select gid, kind, status, timeout_at, next_retry_at, attempts, coalesce(last_error, ''), payload, created_at, updated_at,
    coalesce(trace_context, ''), coalesce(abort_cause, '')
from {{.Global}}
where ($1::text = '' or kind = $1) and ($2::text = '' or status = $2) and ($3::text = '' or gid collate "C" > $3)
  and (not $4::bool or status not in ({{.Finals}}))
  and ($6::float8 = 0 or created_at < now() - make_interval(secs => $6::float8))
order by gid collate "C"
limit $5
{{end}}

{{/* Of the gids $1, those in the log and not finished. */}}
{{define "unfinished"}}select gid from {{.Global}} where gid = any($1::text[]) and status not in ({{.Finals}}){{end}}

{{define "branches"}}
select gid, branch, seq, target_kind, target, payload, status, attempts, coalesce(last_error, ''), updated_at,
    coalesce(refusal, ''), call_options::text
from {{.Branch}} where gid = any($1::text[])
order by gid, seq, branch
{{end}}

{{/* Deletes up to $2 finished transactions older than $1 seconds with their branches, and
returns how many transactions it deleted. */}}
{{define "purge"}}
with g as (
    delete from {{.Global}} where gid in (
        select gid from {{.Global}}
        where status in ({{.Finals}}) and updated_at < now() - make_interval(secs => $1::float8)
        limit $2
    )
    returning gid
), b as (
    delete from {{.Branch}} where gid in (select gid from g)
)
select count(*) from g
{{end}}

{{/* A workflow's step record (Log.PutStep): the branch row inserted or replaced while the
workflow is in status $2, and the driver's lease renewed ($11 seconds), in one statement; with a
new status $13 (Log.FinishStep; '' for none) the workflow moves to it in the same statement. With
$14 >= 0 it writes only while the step at seq $14 has its row (Log.RecordStep, FinishStep). With
$15 its transaction commits without waiting for the WAL flush (RecordStep: synchronous_commit off
until the transaction ends, set_config's is_local; a CASE, so that it is set only then). */}}
{{define "put_step"}}
with g as (
    update {{.Global}} set updated_at = now(), next_retry_at = now() + make_interval(secs => $11::float8),
        status = coalesce(nullif($13, ''), status),
        attempts = case when $13 = '' then attempts else 0 end,
        last_error = case when $13 = '' then last_error end
    where gid = $1 and status = $2
        and ($14::int < 0 or exists (select 1 from {{.Branch}} p where p.gid = $1 and p.seq = $14::int))
        and case when $15::bool then set_config('synchronous_commit', 'off', true) is not null else true end
    returning gid
)
insert into {{.Branch}} (gid, branch, seq, target_kind, target, payload, status, last_error, refusal, call_options, updated_at)
select g.gid, $3, $4, $5, $6, $7, $8, nullif($9, ''), nullif($10, ''), $12::text::jsonb, now() from g
on conflict (gid, branch) do update set payload = excluded.payload, status = excluded.status,
    last_error = excluded.last_error, refusal = excluded.refusal, updated_at = now()
returning 1
{{end}}

{{/* A workflow parked (Log.Park): due again after $4 seconds (a century later, never in
practice, when negative), in status $3, with $5 as its last error when given. */}}
{{define "park"}}
update {{.Global}} set status = $3, updated_at = now(), last_error = coalesce(nullif($5, ''), last_error),
    next_retry_at = case when $4::float8 < 0 then now() + interval '100 years' else now() + make_interval(secs => $4::float8) end
where gid = $1 and status = $2
returning 1
{{end}}
