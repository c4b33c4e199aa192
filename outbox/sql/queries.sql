{{/*
The statements of the outbox and its relay. New renders each named template once, with the
quoted table name and the status names, and keeps the text; the statements are then prepared and
cached by pgx like any other. $n are bind parameters.
*/}}

{{/* The row is inserted only when the table's stored partition count (the meta row) is the
outbox's, $9: an outbox configured with another count inserts nothing, and Enqueue refuses the
message, in the same round trip. $8 is the row's partition, computed by Enqueue. */}}
{{define "enqueue"}}
with m as (
    insert into {{.Table}} (msg_id, topic, key, body, headers, tags, trace_context, partition)
    select $1::uuid, $2::text, nullif($3::text, ''), $4::bytea, $5::jsonb, nullif($6::text, ''), nullif($7::text, ''), $8::smallint
    from {{.Meta}} where partitions = $9::int
    returning 1
)
select count(*) from m
{{end}}

{{/* One statement, so Enqueue costs one round trip. PostgreSQL folds identical notifications
(same channel, same payload) of one transaction into one, delivered at commit. */}}
{{define "enqueue_notify"}}
with m as (
    insert into {{.Table}} (msg_id, topic, key, body, headers, tags, trace_context, partition)
    select $1::uuid, $2::text, nullif($3::text, ''), $4::bytea, $5::jsonb, nullif($6::text, ''), nullif($7::text, ''), $8::smallint
    from {{.Meta}} where partitions = $9::int
    returning 1
)
select count(*) from (select pg_notify($10, '') from m) n
{{end}}

{{/* Enqueue inside Outbox.Do, sent with the transaction's next statement or its commit, in one
batch: no NOTIFY (Do hands the row over after the commit). It returns the row's id, whether its
key had no pending row (not the new one: the statement's snapshot does not see it), read through
the key's bucket in the keys index (sql/schema.sql says why a bucket), whose predicate ("not
dead") it matches and no other index's does — a row without a key is always first — and the age
in seconds of the transaction's start (the row's created_at), for the relay's enqueue → publish
metric. When the partition count is not the outbox's it inserts nothing and fails (division by
zero, which Enqueue reports as the mismatch): the commit sent after it in the batch must not
commit the transaction without its message. */}}
{{define "enqueue_direct"}}
with m as (
    insert into {{.Table}} (msg_id, topic, key, body, headers, tags, trace_context, partition)
    select $1::uuid, $2::text, nullif($3::text, ''), $4::bytea, $5::jsonb, nullif($6::text, ''), nullif($7::text, ''), $8::smallint
    from {{.Meta}} where partitions = $9::int
    returning id
)
select m.id, $3::text = '' or not exists (
    select 1 from {{.Table}} t
    where hashtext(t.key) & 4095 = hashtext($3::text) & 4095 and t.key = $3::text and t.status <> '{{.Dead}}'),
    greatest(extract(epoch from clock_timestamp() - now())::float8, 0)
from (select count(*)::int as n from m) c left join m on true
where 1 / c.n = 1
{{end}}

{{define "partitions"}}select partitions from {{.Meta}}{{end}}

{{/* Whether the table holds pending messages while it has no stored partition count: a table
from before partitions, whose rows are all in partition 0. Migrate then stores 1. */}}
{{define "unpartitioned_backlog"}}
select to_regclass($1) is null and exists (select 1 from {{.Table}} where status = '{{.Pending}}')
{{end}}

{{define "notify"}}select pg_notify($1, ''){{end}}

{{/* The due pending rows, in id order, that per-key order allows now: a row waits while its key
has an earlier pending row that is not due — one waiting out a backoff after a failed publish.
Those rows are few, and only they have attempts > 0 and a future next_attempt_at, so "blocked"
reads them through the small retry index; the main scan then walks the pending index in id order
and stops at the limit. (A correlated "not exists" over the earlier rows of each key instead
visits every earlier pending row of the key: with stale statistics PostgreSQL evaluates it for
the whole backlog, 54 ms per batch at 2,500 pending rows against 2 ms for this form.)
An earlier pending row of the key that is due has a smaller id, so it is in the same batch; the
relay publishes it first and skips the rest of the key when it fails. Rows without a key are
never held back.

The batch is bounded twice: at most $1 rows, and past the first row at most $2 bytes (topic, key
and body as octet_length gives them, which reads a stored value's size without decompressing it,
plus the headers' stored size). The running sum streams with the index scan, so the limit still
stops it. The first row that does not fit comes back as a marker — cut true, body and headers
null, never read whole — telling the relay that the byte bound, not the backlog, ended the batch;
the rows after it are not returned. The last columns are each row's age in seconds by the
database's clock, from which the relay measures enqueue → publish on its own clock, and the trace
context stored by Enqueue ('' when none). */}}
{{/* $3 is the partition the relay reads (0 when the outbox is not split) and $4 the ids of the
rows it holds already — read, and not yet recorded — which a pipelined relay must not read twice
(a hashed subplan: one probe per row walked). */}}
{{define "due"}}
with blocked as materialized (
    select key, min(id) as first
    from {{.Table}}
    where status = '{{.Pending}}' and attempts > 0 and next_attempt_at > now() and key is not null
      and partition = $3
    group by key
),
sized as (
    select t.id, t.msg_id, t.topic, t.key, t.body, t.headers, t.attempts, t.tags, t.created_at, t.trace_context,
           octet_length(t.topic) + coalesce(octet_length(t.key), 0) + octet_length(t.body)
               + coalesce(pg_column_size(t.headers), 0) + coalesce(octet_length(t.tags), 0) as size,
           sum(octet_length(t.topic) + coalesce(octet_length(t.key), 0) + octet_length(t.body)
               + coalesce(pg_column_size(t.headers), 0) + coalesce(octet_length(t.tags), 0)) over w as running,
           row_number() over w as n
    from {{.Table}} t
    where t.status = '{{.Pending}}'
      and t.partition = $3
      and t.next_attempt_at <= now()
      and t.id not in (select unnest($4::bigint[]))
      and not exists (select 1 from blocked b where b.key = t.key and b.first < t.id)
    window w as (order by t.id rows unbounded preceding)
    order by t.id
    limit $1
)
select s.id, s.msg_id, s.topic, coalesce(s.key, ''),
       case when s.cut then null else s.body end, case when s.cut then null else s.headers end,
       s.attempts, s.cut, coalesce(s.tags, ''), greatest(extract(epoch from now() - s.created_at)::float8, 0),
       coalesce(s.trace_context, '')
from (select sized.*, sized.running > $2 and sized.n > 1 as cut from sized) s
where s.running - s.size <= $2 or s.n <= 2
order by s.id
{{end}}

{{define "delete_sent"}}delete from {{.Table}} where id = any($1::bigint[]){{end}}

{{/* Records failed publishes: $1 row ids, $2 errors, $3 max attempts, $4 backoff base and $5 cap
in seconds, $6 whether each failure is permanent (the message goes dead at once). After the n-th
failure the row waits d/2 + random()·d/2, d = min(cap, base·2^(n-1)).
The exponent is clamped and computed in double precision, so no interval overflows. */}}
{{define "fail"}}
update {{.Table}} as t set
    attempts        = t.attempts + 1,
    last_error      = f.err,
    status          = case when t.attempts + 1 >= $3 or f.permanent then '{{.Dead}}' else '{{.Pending}}' end,
    next_attempt_at = now() + make_interval(secs =>
                          least($5::float8, $4::float8 * power(2::float8, least(t.attempts, 62)))
                          * (0.5 + random() * 0.5))
from unnest($1::bigint[], $2::text[], $6::bool[]) as f(id, err, permanent)
where t.id = f.id and t.status = '{{.Pending}}'
returning t.msg_id, t.status = '{{.Dead}}'
{{end}}

{{define "list_dead"}}
select msg_id, topic, coalesce(key, ''), body, headers, attempts, coalesce(last_error, ''), created_at,
       coalesce(tags, '')
from {{.Table}}
where status = '{{.Dead}}'
order by id
limit $1
{{end}}

{{define "requeue"}}
update {{.Table}} set status = '{{.Pending}}', attempts = 0, next_attempt_at = now()
where status = '{{.Dead}}' and msg_id = any($1::uuid[])
{{end}}

{{define "requeue_all"}}
update {{.Table}} set status = '{{.Pending}}', attempts = 0, next_attempt_at = now()
where status = '{{.Dead}}'
{{end}}

{{define "backlog"}}
select count(*) filter (where status = '{{.Pending}}'), count(*) filter (where status = '{{.Dead}}')
from {{.Table}}
{{end}}

{{/* The relay's gauges: the pending rows and the age in seconds of the oldest, in one scan of them. */}}
{{define "pending"}}
select count(*), coalesce(greatest(extract(epoch from now() - min(created_at))::float8, 0), 0)
from {{.Table}}
where status = '{{.Pending}}'
{{end}}
