-- The idempotency-key table. Store.Migrate renders this template and runs it as one implicit
-- transaction; every statement is idempotent, and the advisory lock lets several processes migrate
-- at once (concurrent "create table if not exists" can otherwise fail on pg_type's unique index).
select pg_advisory_xact_lock({{.LockKey}});
{{if .Schema}}create schema if not exists {{.Schema}};
{{end -}}
create table if not exists {{.Table}} (
    scope       text        not null,
    key         text        not null,
    fingerprint bytea,
    status      text        not null check (status in ('claimed', 'completed')),
    result      bytea,
    created_at  timestamptz not null default now(),
    expires_at  timestamptz not null,
    primary key (scope, key)
);
create index if not exists {{.Index}} on {{.Table}} (expires_at);
