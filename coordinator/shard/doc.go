// Package shard spreads one coordinator's log over several PostgreSQL databases (each its own
// primary, or its own HA cluster), for a service whose log outgrows one primary: a [Router]
// routes each transaction to the shard its gid hashes to, and every shard is a coordinator of
// its own — tcc, saga, twopc or threepc — with its own pool, election and fence, so each shard's
// recovery is led and fenced on its own.
//
//	c0, _ := tcc.New(pool0, coordinator.WithSchema("shop"), coordinator.WithElector(el0)) // el0: /shop/tcc/shard0
//	c1, _ := tcc.New(pool1, coordinator.WithSchema("shop"), coordinator.WithElector(el1)) // el1: /shop/tcc/shard1
//	r, _ := shard.New(c0, c1)       // the same order in every instance
//	_ = r.Migrate(ctx)              // also stores which shard each log is
//	go r.Run(ctx)                   // each shard's recovery, under its own election
//	stock, _ := r.Register("stock", stockParticipant)
//	g, _ := r.Begin(ctx)            // a *tcc.Global on one shard, used as always
//	st, _ := r.Status(ctx, g.GID()) // read from the gid's shard
//
// The number and order of the shards is stored with each log at its first Migrate or Run, and an
// instance given other ones is refused there. Give each twopc or threepc shard a schema of its
// own (coordinator.WithSchema), which names its prepared transactions in the participant
// databases. Operators list the transactions of every shard with admin.LogSource's Pool.
// docs/coordinators.md ("Log shards") has what shards give and how they are laid out.
package shard
