// Package coordinator holds what every txkit coordinator — [github.com/txkit/txkit/tcc],
// [github.com/txkit/txkit/saga], [github.com/txkit/txkit/twopc] and
// [github.com/txkit/txkit/threepc] — shares in its API: the options of their New ([Option]) and
// Begin ([BeginOption]), the sentinel errors, a participant branch ([Branch]), [BranchError] and
// [Stats]. Each coordinator package holds only what is specific to its protocol.
//
//	c, err := tcc.New(pool, coordinator.WithSchema("shop"), coordinator.WithElector(el))
//	s, err := saga.New(pool, coordinator.WithSchema("shop"), coordinator.WithElector(el), saga.WithAttempts(5))
//	...
//	if errors.Is(err, coordinator.ErrIncomplete) { ... } // the same value whichever coordinator returned it
//
// The price of one option type for four constructors: a protocol's own option given to another
// protocol's New (saga.WithAttempts to tcc.New) compiles, and New refuses it with an error
// wrapping [ErrInvalidOption] that names it.
//
// Every Begin is Begin(ctx, opts ...[BeginOption]): ctx scopes only the call, and a ctx already
// done returns an error wrapping its error; only tcc's may write (given [WithGID]). Every Stats
// returns [Stats], and every Coordinator embeds [Base].
//
// With [WithPartitions] the recovery is split into partitions by a hash of the gid, each with its
// own election and fencing token, so that several instances share it; package
// [github.com/txkit/txkit/coordinator/shard] spreads one protocol's log over several databases.
// Why the package exists,
// partitioned recovery, group commit and deferred finish, metrics and tracing:
// docs/coordinators.md, docs/metrics.md, docs/tracing.md.
package coordinator
