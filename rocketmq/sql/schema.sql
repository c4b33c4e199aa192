-- The TxProducer's table of local transaction ids. TxProducer.Migrate renders this template and
-- runs it as one implicit transaction; every statement is idempotent, and the advisory lock lets
-- several processes migrate at once.
--
-- A row with committed = true is written by the local transaction itself, so it exists exactly
-- when that transaction committed. A row with committed = false is a check-back's tombstone: the
-- half message was rolled back, and a late local transaction with the same id fails on the
-- primary key instead of committing.
select pg_advisory_xact_lock({{.LockKey}});
{{if .Schema}}create schema if not exists {{.Schema}};
{{end -}}
create table if not exists {{.Table}} (
    id         uuid        primary key,
    committed  boolean     not null default true,
    created_at timestamptz not null default now()
);
