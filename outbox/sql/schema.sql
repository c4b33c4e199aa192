-- The outbox table. Outbox.Migrate renders this template and runs it as one implicit transaction;
-- every statement is idempotent, and the advisory lock lets several processes migrate at once
-- (concurrent "create table if not exists" can otherwise fail on pg_type's unique index).
select pg_advisory_xact_lock({{.LockKey}});
{{if .Schema}}create schema if not exists {{.Schema}};
{{end -}}
create table if not exists {{.Table}} (
    id              bigserial   primary key,          -- relay order
    msg_id          uuid        not null unique,      -- Message.ID: broker key, consumers' idempotency key
    topic           text        not null,
    key             text,                              -- Message.Key; null when empty (no ordering)
    body            bytea       not null,
    headers         jsonb,
    status          text        not null default '{{.Pending}}' check (status in ('{{.Pending}}', '{{.Dead}}')),
    attempts        integer     not null default 0,   -- failed publishes so far
    next_attempt_at timestamptz not null default now(),
    last_error      text,
    created_at      timestamptz not null default now()
);
-- The relay reads pending rows in id order...
-- Message.Tags (the RocketMQ tag; null when empty), added to tables created before it existed.
-- Adding a nullable column without a default rewrites nothing.
alter table {{.Table}} add column if not exists tags text;
-- The W3C trace context of the ctx that enqueued the message (obs.EncodeTrace; null without one):
-- the relay's publish span is its child. Added to tables created before it existed.
alter table {{.Table}} add column if not exists trace_context text;
-- The partition of the row among the outbox's (WithPartitions; 0 when not split), set by Enqueue
-- from a stable hash of the key (of the message id when there is no key). Added to tables created
-- before it existed: a constant default rewrites nothing.
alter table {{.Table}} add column if not exists partition smallint not null default 0;
-- The relay reads each partition's pending rows in id order. (The index on (id) alone that came
-- before partitions is dropped: this one serves every query it served.)
create index if not exists {{.PartIndex}} on {{.Table}} (partition, id) where status = '{{.Pending}}';
drop index if exists {{.PendingIndex}};
-- ...and, for per-key order, finds the rows waiting out a backoff after a failed publish. Only
-- those have attempts > 0 and a future next_attempt_at (Enqueue and Requeue set attempts = 0 and
-- next_attempt_at = now()), so this index stays tiny and costs Enqueue nothing.
-- It leads with the partition, so that a relay reading one partition finds that partition's
-- failed rows here rather than walking its pending rows in the index above. (The index on
-- (next_attempt_at) alone that came before partitions is dropped.)
create index if not exists {{.PartRetryIndex}} on {{.Table}} (partition, next_attempt_at) where status = '{{.Pending}}' and attempts > 0;
drop index if exists {{.RetryIndex}};
-- Outbox.Do's Enqueue asks whether the row's key has a pending row (the hand-over publishes the
-- first of a key at once). The index holds the pending rows with a key by bucket: the low 12
-- bits of the key's hashtext (4096 buckets; not md5, which a FIPS build refuses), and the lookup
-- reads the key's bucket. Many rows
-- share a bucket, so deduplication keeps the index small under a queue's churn, while an index on
-- the key itself kept the entry of every row sent until vacuum, and its pages after: priced by
-- pages per live entry, the planner then walked every pending row through the relay's index, or
-- read the table, instead (docs/outbox.md, "The table under churn"). Its predicate says "not
-- dead" (the same rows as "pending") so that no other index can answer the lookup. The key index
-- of earlier versions is dropped. A role that does not own the table leaves the indexes and
-- settings as they were (they need the owner).
-- Queue table: every row is inserted, then deleted soon after. Autovacuum clears the dead rows
-- after a fixed count of them rather than a fraction of a table that is mostly empty, without
-- pausing (its default cost delay throttles it while the dead entries pile up).
do $$ begin
    create index if not exists {{.KeysIndex}} on {{.Table}} ((hashtext(key) & 4095)) where status <> '{{.Dead}}' and key is not null;
    drop index if exists {{.KeyIndex}};
    alter table {{.Table}} set (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);
exception when insufficient_privilege then null; end $$;
