{{/*
The statements of the outbox and its relay. New renders each named template once, with the
quoted table name and the status names, and keeps the text; the statements are then prepared and
cached by pgx like any other. $n are bind parameters.
*/}}

{{define "enqueue"}}
insert into {{.Table}} (msg_id, topic, key, body, headers)
values ($1, $2, nullif($3, ''), $4, $5)
{{end}}

{{/* One statement, so Enqueue costs one round trip. PostgreSQL folds identical notifications
(same channel, same payload) of one transaction into one, delivered at commit. */}}
{{define "enqueue_notify"}}
with m as (
    insert into {{.Table}} (msg_id, topic, key, body, headers)
    values ($1, $2, nullif($3, ''), $4, $5)
    returning 1
)
select pg_notify($6, '') from m
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
never held back. */}}
{{define "due"}}
with blocked as materialized (
    select key, min(id) as first
    from {{.Table}}
    where status = '{{.Pending}}' and attempts > 0 and next_attempt_at > now() and key is not null
    group by key
)
select t.id, t.msg_id, t.topic, coalesce(t.key, ''), t.body, t.headers, t.attempts
from {{.Table}} t
where t.status = '{{.Pending}}'
  and t.next_attempt_at <= now()
  and not exists (select 1 from blocked b where b.key = t.key and b.first < t.id)
order by t.id
limit $1
{{end}}

{{define "delete_sent"}}delete from {{.Table}} where id = any($1::bigint[]){{end}}

{{/* Records failed publishes: $1 row ids, $2 errors, $3 max attempts, $4 backoff base and $5 cap
in seconds. After the n-th failure the row waits d/2 + random()·d/2, d = min(cap, base·2^(n-1)).
The exponent is clamped and computed in double precision, so no interval overflows. */}}
{{define "fail"}}
update {{.Table}} as t set
    attempts        = t.attempts + 1,
    last_error      = f.err,
    status          = case when t.attempts + 1 >= $3 then '{{.Dead}}' else '{{.Pending}}' end,
    next_attempt_at = now() + make_interval(secs =>
                          least($5::float8, $4::float8 * power(2::float8, least(t.attempts, 62)))
                          * (0.5 + random() * 0.5))
from unnest($1::bigint[], $2::text[]) as f(id, err)
where t.id = f.id and t.status = '{{.Pending}}'
returning t.msg_id, t.status = '{{.Dead}}'
{{end}}

{{define "list_dead"}}
select msg_id, topic, coalesce(key, ''), body, headers, attempts, coalesce(last_error, ''), created_at
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

{{define "pending"}}select count(*) from {{.Table}} where status = '{{.Pending}}'{{end}}
