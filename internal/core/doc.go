// Package core is the coordinator core shared by tcc, saga, twopc and threepc: the durable log of
// global transactions and their branches in PostgreSQL ([Log]), their typed states and the one
// table of allowed transitions (state.go), and the [Recoverer] that, on the elected leader only,
// drives to their end the transactions whose starter vanished.
//
// It is also the coordinators' one base ([Base]: New, Migrate, Register, Status, Stats, Begin's
// defaults and Run, with errors prefixed by the coordinator's name), their [Config] with the
// [Option] type that sets it, and the sentinel errors they all return. Users reach those through
// package coordinator, which exports them (aliases of the types, the option functions, the same
// sentinel values); each coordinator package keeps only what is specific to its protocol.
//
// Tables (in the schema of [WithSchema]):
//
//	txkit_global  gid pk, kind, status, timeout_at, next_retry_at, attempts, last_error, payload, created_at, updated_at
//	txkit_branch  (gid, branch) pk, seq, target_kind, target, payload, status, attempts, last_error, updated_at
//
// The rules:
//   - Every decision is written before it is acted on, and every state change is one PostgreSQL
//     transaction conditioned on the old status — or, with [WithGroupCommit], shares one with the
//     starters' state changes of other transactions, each conditioned on its own old status.
//   - A starter owns a transaction while it drives it: recording a decision sets next_retry_at to
//     now() + the lease ([WithLease]). A transaction still trying has next_retry_at = timeout_at.
//     The leader claims only transactions whose next_retry_at has passed: starter vanished,
//     backoff over, or timeout reached (then trying → cancelling).
//   - The leader's writes pass the [fence.Fence] (resource "core:<schema.table>") with its
//     leadership token, so a deposed leader changes nothing.
//   - Recovery may be split into P partitions by a hash of the gid ([WithPartitions],
//     [NewPartitionedRecoverer], on internal/leader's Shards): each partition has its own election
//     and fence resource ("core:<schema.table>/p<i>"), its leader claims only its gids (the claim
//     adds the hash condition, computed by PostgreSQL), and a leader's [Log.Record] passes the
//     fence of the gid's partition. P is stored in <prefix>partitions at the first Run and a
//     recoverer with another P is refused.
//   - All due times are computed by PostgreSQL (now() in the statement), never the Go clock.
//   - Failures are counted (attempts, per transaction and per branch), stored (last_error) and
//     retried with exponential backoff and jitter computed in SQL; nothing is dropped. Finished
//     transactions are deleted by the retention job ([WithRetention]).
//   - A panic in a participant call ([Base.Call]) or in a [Driver] is recovered, logged with its
//     stack and handled as a failure (a *[PanicError], "panic: <value>"), so a panicking
//     in-process participant cannot crash the leader, and with it every leader in turn.
//
// A recipe (what tcc does):
//
//	l, _ := core.New(pool, core.WithSchema("app"))
//	_ = l.Migrate(ctx)
//	_ = l.Create(ctx, gid, core.KindTCC, time.Minute, nil)
//	_ = l.AddBranch(ctx, gid, core.StatusTrying, core.Branch{Name: "stock", Target: core.Target{Kind: core.TargetHTTP, Ref: url}})
//	// ... call try ...
//	_, _ = l.Decide(ctx, gid, core.StatusTrying, core.StatusConfirming)
//	// ... call confirms ...
//	_ = l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusConfirming, Done: []string{"stock"}, Next: core.StatusConfirmed})
package core
