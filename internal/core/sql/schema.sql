-- The coordinator log. Log.Migrate renders this template and runs it as one implicit
-- transaction; every statement is idempotent, and the advisory lock lets several processes
-- migrate at once.
select pg_advisory_xact_lock({{.LockKey}});
{{if .Schema}}create schema if not exists {{.Schema}};
{{end -}}
create table if not exists {{.Global}} (
    gid           text        primary key,
    kind          text        not null,               -- Kind.String: tcc, saga, 2pc
    status        text        not null,               -- Status.String
    timeout_at    timestamptz not null,               -- trying past it → cancelling
    next_retry_at timestamptz not null,               -- when the leader may drive it (lease, backoff, or timeout)
    attempts      integer     not null default 0,     -- failed drives since the last status change
    last_error    text,
    payload       bytea,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now()
);
-- The W3C trace context of the ctx that began the transaction (obs.EncodeTrace), so that a
-- recovery drive continues its trace; added to existing deployments here.
alter table {{.Global}} add column if not exists trace_context text;
-- Why a transaction that did not commit rolled back, when the log knows: 'refused' (a branch's
-- participant refused: its branch row holds the reason), 'timeout' (the leader cancelled it at its
-- timeout); null otherwise (the starter rolled back after a failure). Added to existing deployments
-- here; their rows keep null.
alter table {{.Global}} add column if not exists abort_cause text;
-- The leader's claim walks this index: only unfinished transactions are in it.
create index if not exists {{.DueIndex}} on {{.Global}} (next_retry_at)
    where status not in ({{.Finals}});
-- The retention job walks this one.
create index if not exists {{.DoneIndex}} on {{.Global}} (updated_at)
    where status in ({{.Finals}});
-- A branch row has no foreign key to its transaction's: every insert of one finds the global row
-- in the same statement (create_with_branches; add_branch, which also locks it FOR SHARE), and the
-- retention job deletes both (purge). The key's check, a query of its own per inserted row, cost
-- 4-9 % of the log's throughput and 7-13 % of PostgreSQL's processor time per transaction
-- (BenchmarkBranchKey, internal/core); Log.Migrate drops the key from tables created with it.
create table if not exists {{.Branch}} (
    gid         text    not null,
    branch      text    not null,
    seq         integer not null,                     -- order of registration (saga order)
    target_kind text    not null,                     -- TargetKind.String: http, inproc, grpc
    target      text    not null,                     -- URL, or registered participant name (inproc, grpc)
    payload     bytea,
    status      text    not null,                     -- BranchStatus.String
    attempts    integer not null default 0,           -- failed ops
    last_error  text,
    primary key (gid, branch)
);
-- When the branch's status, attempts or last error last changed (its recording, before that): the
-- operator console's branch timeline. Added to existing deployments here; their rows get the time
-- of this migration.
alter table {{.Branch}} add column if not exists updated_at timestamptz not null default now();
-- A participant's refusal of the branch (the error wrapping participant.ErrRefused, bounded): the
-- business reason the transaction rolled back. Added to existing deployments here.
alter table {{.Branch}} add column if not exists refusal text;
-- How the branch's participant is called, when not as by default: {"timeout_ms": n, "header":
-- {"Name": ["value"]}} (core.Target's Timeout and Header); NULL for neither. Added here.
alter table {{.Branch}} add column if not exists call_options jsonb;
