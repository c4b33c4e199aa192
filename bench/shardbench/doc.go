// Package shardbench holds the benchmark of a coordinator log spread over 1, 2 and 3 PostgreSQL
// servers (package coordinator/shard), TCC and sagas in one run, on the servers `make up` starts
// (TXKIT_PG_URL's and the two of TXKIT_PG_SHARD_URLS): throughput, PostgreSQL commits per
// transaction and the processor time of each shard's server per transaction. `make bench-shards`
// runs it; docs/coordinators.md ("Log shards") reads its figures. The package has no code of its
// own; everything is in its tests.
package shardbench
