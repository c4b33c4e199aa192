{{/* The statements of group commit (groupcommit.go): each makes the writes of several
transactions of distinct gids, given as parallel arrays, and returns the gids it changed. A batch
sends those it needs in one implicit transaction. Each keeps the condition of the statement it
stands for (create, create_with_branches, add_branch, decide, finish in queries.sql). */}}

{{/* Transactions with their branches ($8.. one row per branch, gid first): a gid taken is not
inserted (and its branches are not), as the unique violation of "create" refuses it. */}}
{{define "group_create"}}
with g as (
    insert into {{.Global}} (gid, kind, status, timeout_at, next_retry_at, payload, trace_context)
    select t.gid, t.kind, t.status, now() + make_interval(secs => t.timeout), now() + make_interval(secs => t.due),
        t.payload, nullif(t.trace, '')
    from unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::float8[], $6::bytea[], $7::text[])
        as t(gid, kind, status, timeout, due, payload, trace)
    on conflict (gid) do nothing
    returning gid
), b as (
    insert into {{.Branch}} (gid, branch, seq, target_kind, target, payload, status)
    select b.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, '{{.BranchPending}}'
    from unnest($8::text[], $9::text[], $10::int[], $11::text[], $12::text[], $13::bytea[])
        as b(gid, branch, seq, target_kind, target, payload)
    join g on g.gid = b.gid
)
select gid from g
{{end}}

{{/* Branches of transactions in the status each requires; FOR SHARE as in add_branch. */}}
{{define "group_branch"}}
insert into {{.Branch}} (gid, branch, seq, target_kind, target, payload, status)
select g.gid, b.branch, b.seq, b.target_kind, b.target, b.payload, '{{.BranchPending}}'
from unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::bytea[], $7::text[])
    as b(gid, branch, seq, target_kind, target, payload, want)
join {{.Global}} g on g.gid = b.gid and g.status = b.want
for share of g
on conflict (gid, branch) do nothing
returning gid
{{end}}

{{define "group_decide"}}
update {{.Global}} as g set status = d.next, attempts = 0, last_error = null, updated_at = now(),
    next_retry_at = now() + make_interval(secs => $4::float8)
from unnest($1::text[], $2::text[], $3::text[]) as d(gid, prev, next)
where g.gid = d.gid and g.status = d.prev
returning g.gid
{{end}}

{{/* Finishes ($1..$3) and the branches they mark done ($5..$7, one row per branch). */}}
{{define "group_finish"}}
with b as (
    update {{.Branch}} as br set status = d.status, updated_at = now()
    from unnest($5::text[], $6::text[], $7::text[]) as d(gid, branch, status)
    where br.gid = d.gid and br.branch = d.branch and br.status <> d.status
)
update {{.Global}} as g set status = f.next, attempts = 0, last_error = null, updated_at = now(),
    next_retry_at = case when f.next = '{{.Trying}}' then g.timeout_at else now() + make_interval(secs => $4::float8) end
from unnest($1::text[], $2::text[], $3::text[]) as f(gid, prev, next)
where g.gid = f.gid and g.status = f.prev
returning g.gid
{{end}}
