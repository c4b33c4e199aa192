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
//	txkit_branch  (gid, branch) pk, seq, target_kind, target, payload, status, attempts, last_error, updated_at, call_options
//
// The rules every state change keeps (decisions written before they are acted on, conditional
// updates, the starter's lease, fenced leader writes, PostgreSQL's clock, failures retried with
// backoff, panics recovered): docs/coordinators.md ("The core's rules").
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
