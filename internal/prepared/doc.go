// Package prepared is the PostgreSQL prepared-transaction plumbing the coordinators whose
// database branches end with PREPARE TRANSACTION share: twopc (two-phase commit) and threepc
// (three-phase commit). It holds, written once:
//
//   - the names: [CheckName] refuses a gid, branch, database name or namespace that could mean
//     anything but itself in a statement, a log line or a terminal, [Quote] makes a name a
//     string literal (PREPARE TRANSACTION and its kin take no parameters), and a [Namespace]
//     names a coordinator's prepared transactions "txkit:<schema>.<prefix>:<length of gid>:<gid>:<branch>"
//     so that its scan finds its own and leaves everyone else's alone;
//   - a registered database ([DB]): the caller's pool and the coordinator's small phase-two pool,
//     which phase two and the scan use so they never wait behind work holding the caller's pool;
//     and a coordinator's set of them ([Registry]: RegisterDB, Close, and the participant of the
//     coordinator core that ends a branch's prepared transaction);
//   - phase two ([Finish]: COMMIT PREPARED or ROLLBACK PREPARED, a prepared transaction that is
//     not there counting as done) and the scan of pg_prepared_xacts ([Scan]);
//   - the connections a starter's branches prepared on, carried by a context to the code that
//     runs their phase two ([WithHeld], [HeldConn]).
//
// Errors are plain descriptions: the callers wrap them with their own sentinels. Nothing here
// holds package-level state; every function and type is safe for concurrent use.
//
// A recipe (a coordinator's branch db of transaction gid):
//
//	ns, err := prepared.NewNamespace(schema, tablePrefix) // once, in the coordinator's constructor
//	d, err := prepared.NewDB("east", pool, 2)              // RegisterDB; d.Close() in Close
//	id := ns.ID(gid, d.Name)
//	_, err = tx.Exec(ctx, "PREPARE TRANSACTION "+prepared.Quote(id))
//	err = prepared.Finish(ctx, d.P2, prepared.Commit, id) // phase two, by anyone
//	found, err := prepared.Scan(ctx, d.P2, ns, grace)     // the in-doubt resolver
package prepared
