# txkit: the whole set-up on a fresh machine is `make demo` and `make test`.
# Servers run as local processes (deploy/local); state and logs live in $(TXKIT_HOME).
SHELL := /bin/bash
GO ?= go
TXKIT_HOME ?= $(CURDIR)/.txkit
export TXKIT_HOME
# Extra flags for go test, e.g. GOTESTFLAGS=-json (as .ci/run does) or GOTESTFLAGS='-run Lock -v'.
GOTESTFLAGS ?=
BENCHFLAGS ?= -benchtime=2s
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The servers' addresses (deploy/local/env) exported for the command that follows.
WITH_ENV = set -a && eval "$$(deploy/local/env)" && ROCKETMQ_GO_LOG_LEVEL=error && set +a &&

.PHONY: bench-locks bench-concurrency bench-floor up down status test unit demo tcc-order drill-tcc drill-tcc-grpc drill-tcc-locks drill-ha lockwatch saga-order drill-saga workflow-order drill-workflow transfer drill-2pc drill-3pc bench lint env recharge stock console console-screenshot proto

# MQ names the RocketMQ clusters up starts besides the single broker: all (a DLedger group and two
# masters, which the cluster tests need), dledger, two-masters or none.
MQ ?= all
up: ## start PostgreSQL, the ZooKeeper ensemble, Redis (also under Sentinel) and RocketMQ (also its clusters; MQ=none skips them), installing what is missing
	@TXKIT_MQ_CLUSTERS='$(MQ)' deploy/local/up

down: ## stop the servers that up started
	@deploy/local/down

status: ## show each server and whether it answers
	@deploy/local/status

env: ## print the servers' addresses as shell assignments
	@deploy/local/env

# Packages whose tests run rocketmq-client-go v2.1.2 are tested without -race: that client writes and
# reads its own `close` flag without synchronisation (internal/client.go:555 in Shutdown vs :576 in
# InvokeSync), so the race detector fails any test that shuts a consumer down. Everything else runs
# with -race. The list is computed, not kept by hand.
ROCKETMQ_PKGS = $$($(GO) list -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... | \
	awk '$$1 ~ /\.test$$/ && / github.com\/apache\/rocketmq-client-go\/v2 /{sub(/\.test$$/,"",$$1); print $$1}')

# The RocketMQ pass starts its longest packages first (their times at the last CI: rocketmq 88 s,
# outbox 82 s, drills/register-points 57 s); in go list's order rocketmq started last and ran
# alone for about a minute. A name missing from the pass is ignored; the others keep their order.
ROCKETMQ_FIRST = rocketmq outbox drills/register-points

# go-zookeeper v1.0.4 races on its own Conn.lastZxid when a connection is re-established with
# watches set (recvLoop, conn.go:849, writes it; sendSetWatches, conn.go:614, reads it). The lock/zklock
# tests that make it reconnect — a connection cut by the test proxy, a ZooKeeper server restarted —
# therefore run without -race, right after the RocketMQ packages; the rest of lock/zklock runs with -race.
# Known upstream: go-zookeeper/zk pull request 35 (open), samuel/go-zookeeper issue 260 (open).
ZK_RECONNECT_TESTS = ReplyLost|SessionExpires|ShortOutage|ElectionOutages|DeposedHolderFenced|WhileZKServerRestarts

# Tests named ...Disruptive... stop a server the other tests use (the RocketMQ broker, PostgreSQL):
# they run last, one package at a time, after everything else. Only the packages that have one are
# given to that last go test (computed, like ROCKETMQ_PKGS): with -p 1 over ./... it built, linked
# and started every other package's test binary one after the other for nothing (about 3 minutes of
# the run on a loaded 2-core machine, 14 s for these packages alone).
DISRUPTIVE_PKGS = $$($(GO) list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r p d; do \
	grep -qsE '^func (Test|Example|Fuzz)[A-Za-z0-9_]*Disruptive' "$$d"/*_test.go && echo "$$p"; done)

test: up ## the whole suite against the real servers
	@$(WITH_ENV) mq="$(ROCKETMQ_PKGS)"; rest=$$($(GO) list ./... | grep -v -x -F -f <(printf '%s\n' $$mq)); rc=0; \
	$(GO) test -race -count=1 -timeout 40m -skip 'Disruptive|$(ZK_RECONNECT_TESTS)' $(GOTESTFLAGS) $$rest || rc=1; \
	first=$$(printf 'github.com/txkit/txkit/%s\n' $(ROCKETMQ_FIRST)); \
	mq=$$(printf '%s\n' $$first $$mq | awk 'NR==FNR{in_mq[$$0]=1; next} in_mq[$$0] && !seen[$$0]++' <(printf '%s\n' $$mq) -); \
	if [ -n "$$mq" ]; then $(GO) test -count=1 -timeout 40m -skip Disruptive $(GOTESTFLAGS) $$mq || rc=1; fi; \
	$(GO) test -count=1 -timeout 20m -run '$(ZK_RECONNECT_TESTS)' -skip Disruptive $(GOTESTFLAGS) ./lock/zklock/ || rc=1; \
	TXKIT_PG_URL="$$TXKIT_PG_BOUNCER_URL" $(GO) test -count=1 -p 3 -timeout 20m -run '^TestIntegration' -skip 'Disruptive|$(BOUNCER_SKIP)' $(GOTESTFLAGS) $(BOUNCER_PKGS) || rc=1; \
	dis="$(DISRUPTIVE_PKGS)"; if [ -n "$$dis" ]; then $(GO) test -count=1 -p 1 -timeout 20m -run Disruptive $(GOTESTFLAGS) $$dis || rc=1; fi; \
	exit $$rc

# The suites of the coordinators, the outbox, notify and idempotency run once more through PgBouncer
# (transaction pooling, in front of the HA PostgreSQL: TXKIT_PG_BOUNCER_URL), without -race (the
# RocketMQ client, above); about a minute. Left out (BOUNCER_SKIP):
#  - tests of LISTEN/NOTIFY wake-ups (a pooler delivers no notification: behind one the relay and
#    the notifier drop their LISTEN and poll) and a hand-over under load that counts on them;
#  - tests that find their backend in pg_locks by the connection's process id (the pooler's);
#  - tests of the statements' plans that read PostgreSQL's per-index counters, which a backend
#    the pooler keeps open reports only at its idle report (~10 s of waiting, nothing pooled to test);
#  - the slow outage, failover and SIGKILL tests (10-25 s each), which run above on the direct
#    server: through the pooler they repeat the same code paths.
# docs/production.md has the table of what works through a transaction pooler.
# Its tests wait on the servers more than they compute: three packages run at once (-p 3), the
# longest first (notify ~37 s, twopc ~31 s, outbox ~29 s, then tcc, saga, workflow, idempotency: ~10 s or less),
# so that the pass takes about as long as its longest package instead of half their sum (measured
# back to back on the loaded 2-core machine: 47 s, against 73 s two at a time in the old order).
BOUNCER_PKGS = ./notify/ ./twopc/ ./outbox/ ./tcc/ ./saga/ ./workflow/ ./idempotency/
BOUNCER_SKIP = EnqueueNotifies|DoWakesLeaderElsewhere|RelayWakesOnNotify|RelayListenerReconnects|RelayHandOverRecordsFirst|InProgressBlocks|RepeatableReadWaiterFails|OutageLogsBounded|KeyOrderAcrossRelayFailover|PartitionedRelayFailover|PartitionedDeliveryAcrossKills|ByIDStatementsSkipDueIndex|LeaderSkipsDeliveredHistory|ListFailedUsesIndex

unit: ## tests that need no server (the RocketMQ-client packages without -race, as in test)
	@mq="$(ROCKETMQ_PKGS)"; rest=$$($(GO) list ./... | grep -v -x -F -f <(printf '%s\n' $$mq)); rc=0; \
	$(GO) test -short -race -count=1 -run '^Test' $$rest || rc=1; \
	if [ -n "$$mq" ]; then $(GO) test -short -count=1 -run '^Test' $$mq || rc=1; fi; \
	exit $$rc

demo: up ## run the register-points example end to end on the real servers
	@$(WITH_ENV) $(GO) run ./drills/register-points

# TRANSPORT=grpc runs the tcc-order targets with stock, account and the orders over gRPC (make
# drill-tcc TRANSPORT=grpc); unset, over HTTP. drill-tcc-grpc is drill-tcc and drill-saga over gRPC.
TRANSPORT ?=
TRANSPORT_FLAG = $(if $(TRANSPORT),-transport $(TRANSPORT))

tcc-order: up ## run the tcc-order example (TCC over order, stock and account services) end to end
	@$(WITH_ENV) $(GO) run ./drills/tcc-order $(TRANSPORT_FLAG)

drill-tcc: up ## TCC failover drill: 3 coordinators, 2000 orders, faults, leader and participant SIGKILLs
	@$(WITH_ENV) $(GO) run ./drills/tcc-order -drill -instances 3 -orders 2000 -rate 40 -kills 6 -participant-kills 4 $(TRANSPORT_FLAG)

drill-tcc-grpc: up ## drill-tcc, then drill-saga, with the order service calling stock and account over gRPC
	@$(MAKE) --no-print-directory drill-tcc TRANSPORT=grpc && $(MAKE) --no-print-directory drill-saga TRANSPORT=grpc

drill-tcc-locks: up ## the drill-tcc load and kills twice more: recovery elections on PostgreSQL lease rows, then on Redis
	@$(WITH_ENV) for l in pg redis; do echo "== drill-tcc with -lock $$l"; \
	  $(GO) run ./drills/tcc-order -drill -lock $$l -instances 3 -orders 2000 -rate 40 -kills 6 -participant-kills 4 || exit 1; done

# SEED=n replays a fault order; SESSION_TIMEOUT=1s runs the workloads' elections at 1 s;
# The workloads run on the HA PostgreSQL (TXKIT_PG_HA_URL) and its primary is one of the faults;
# PG_HA=0 keeps them on the single server.
PG_HA ?= 1
drill-ha: up ## register-points (outbox, txmsg), tcc-order and a per-key order load on the DLedger group, Redis Sentinel and the HA PostgreSQL, under load, while the DLedger leader, the ZooKeeper leader, the Redis primary and the PostgreSQL primary are SIGKILLed in a seeded order
	@$(WITH_ENV) $(GO) run ./drills/ha $(if $(SEED),-seed $(SEED)) $(if $(SESSION_TIMEOUT),-session-timeout $(SESSION_TIMEOUT)) $(if $(filter 1,$(PG_HA)),-pg-ha)

lockwatch: up ## elections held 10 minutes at a 1 s session timeout / lease TTL on zk, pg, redis, redis-sentinel, no leader killed: counts false failovers
	@$(WITH_ENV) $(GO) run ./drills/lockwatch -locks zk,pg,redis,redis-sentinel -ttl 1s -for 10m

saga-order: up ## run the tcc-order example with every order a saga (deduct stock, then debit money) end to end
	@$(WITH_ENV) $(GO) run ./drills/tcc-order -mode saga $(TRANSPORT_FLAG)

drill-saga: up ## saga failover drill: the drill-tcc load and kills with every order a saga
	@$(WITH_ENV) $(GO) run ./drills/tcc-order -drill -mode saga -instances 3 -orders 2000 -rate 40 -kills 6 -participant-kills 4 $(TRANSPORT_FLAG)

workflow-order: up ## run the tcc-order example with every order a workflow (package workflow) end to end
	@$(WITH_ENV) $(GO) run ./drills/tcc-order -mode workflow $(TRANSPORT_FLAG)

drill-workflow: up ## workflow failover drill: the drill-tcc load and kills (2000 orders) with every order a workflow
	@$(WITH_ENV) $(GO) run ./drills/tcc-order -drill -mode workflow -instances 3 -orders 2000 -rate 40 -kills 6 -participant-kills 4 $(TRANSPORT_FLAG)

transfer: up ## run the transfer example (two-phase commit between txkit_east and txkit_west) end to end
	@$(WITH_ENV) $(GO) run ./drills/transfer

# The banks commit with vote markers (twopc.WithVoteMarkers, the default); VOTES=0 runs them with the
# decision written between the phases instead (make drill-2pc VOTES=0).
VOTES ?=
drill-2pc: up ## 2PC failover drill: 3 bank coordinators, 2000 transfers, leader SIGKILLs between the phases
	@$(WITH_ENV) $(GO) run ./drills/transfer -drill -instances 3 -transfers 2000 -rate 40 -concurrency 16 -kills 8 -pause-rate 0.2 -pause 1s $(if $(VOTES),-votes=$(VOTES))

drill-3pc: up ## 2PC vs 3PC on the transfer drill: blocking after leader SIGKILLs (p50/p99), partition anomalies (textbook vs consult-log)
	@$(WITH_ENV) $(GO) run ./drills/transfer -compare -drill -instances 3 -transfers 2000 -rate 40 -concurrency 16 -kills 8 -pause-rate 0.2 -pause 1s -partitions 5 -timeout 15m

# The HA PostgreSQL (deploy/local/pg-ha: Patroni, synchronous_mode) failed over under load: its primary
# SIGKILLed twice (the second time the node promoted by the first, after the killed one rejoined),
# then cut off the network once (internal/testkit/netcut: iptables; healed once a new primary takes writes), during
# register-points (outbox and relay), tcc-order as TCC and as sagas and transfer without and with
# vote markers, each checking its invariants and
# printing the failover figures; then transfer with vote markers once more with asynchronous
# replication (-pg-async: the primary's WAL senders held back 1 s before each kill), which loses
# acknowledged commits: its report says what broke (the target does not fail on it). About 15 minutes.
PG_DRILL = -pg "$$TXKIT_PG_HA_URL" -rate 25 -pg-failovers 3 -pg-cut -kill-every 3s
.PHONY: drill-pg-failover
drill-pg-failover: up ## PostgreSQL failover drill: the HA primary SIGKILLed twice and cut off once under register-points, tcc-order (TCC, saga) and transfer (2PC, votes off/on); then asynchronous replication
	@$(WITH_ENV) deploy/local/pg-ha sync on && \
	echo "== register-points (outbox, relay, idempotent consumer) on the HA PostgreSQL, 2 primary kills and a cut" && \
	$(GO) run ./drills/register-points -users 3000 -rate 25 -pg "$$TXKIT_PG_HA_URL" -pg-failovers 3 -pg-cut && \
	for m in tcc saga; do echo "== tcc-order -mode $$m on the HA PostgreSQL, 2 primary kills and a cut"; \
	  $(GO) run ./drills/tcc-order -mode $$m -orders 3000 $(PG_DRILL) || exit 1; done && \
	for v in -votes=false -votes; do echo "== transfer $$v on the HA PostgreSQL, 2 primary kills and a cut"; \
	  $(GO) run ./drills/transfer $$v -transfers 3000 $(PG_DRILL) || exit 1; done && \
	echo "== transfer -votes with ASYNCHRONOUS replication (-pg-async: Patroni synchronous_mode off), 2 primary kills and a cut" && \
	{ $(GO) run ./drills/transfer -votes -transfers 3000 $(PG_DRILL) -pg-async || echo "asynchronous replication: the invariants above broke (see the report)"; }

.PHONY: scale-out
scale-out: up ## the relay and register-points over 1, 2, 3 instances sharing 12 partitions (throughput, commit → awarded latency, CPU per message), then the partitioned drill (SIGKILLs under load, takeover times)
	@set -o pipefail; $(WITH_ENV) $(GO) test -run '^$$' -bench RelayScaleOut -benchtime 3x ./outbox/ | grep -E '^Benchmark' && \
	for n in 1 2 3; do echo "== register-points: $$n users instances sharing 12 partitions, 2000 users at full speed"; \
	  $(GO) run ./drills/register-points -instances $$n -partitions 12 -users 2000 -rate 0 -concurrency 32 | sed -n '/^register-points report/,$$p' || exit 1; done && \
	echo "== drill: 3 users instances sharing 12 partitions, 2000 users, SIGKILLs under load" && \
	$(GO) run ./drills/register-points -instances 3 -partitions 12 -users 2000 -drill | sed -n '/drill:/p;/^register-points report/,$$p'

# BenchmarkLocksKill is left to bench-locks: each iteration SIGKILLs a holder process with the timer
# stopped, so a -benchtime in seconds never ends it (bench-locks gives it -benchtime=3x).
bench: up ## Go benchmarks against the real servers (not the ones that restart servers or kill holders: see bench-locks), then the concurrency table
	@$(WITH_ENV) $(GO) test -run '^$$' -bench . -skip 'Disruptive|^BenchmarkConcurrency$$|^BenchmarkLocksKill$$' -benchmem -count=1 $(BENCHFLAGS) ./...
	@$(MAKE) --no-print-directory bench-concurrency

# Every recipe (TCC, saga, 2PC, relay, idempotent consumer, notify, idempotency claim, lock
# hand-off) at 1, 16 and 64 concurrent clients against its bare baseline, in rotating blocks of
# CONCBENCH_BLOCK per side, CONCBENCH_ROUNDS rounds, and pgbench's ceiling for the same writes
# (CONCBENCH_PGBENCH after each round); benchtable prints the table. About 7.5 minutes with the
# defaults (docs/benchmarks.md). CONCBENCH_RUN narrows it, e.g. CONCBENCH_RUN='Concurrency/saga/'.
CONCBENCH_BLOCK ?= 1s
CONCBENCH_ROUNDS ?= 5
CONCBENCH_PGBENCH ?= 1s
CONCBENCH_RUN ?= ^BenchmarkConcurrency$$
# CONCBENCH_GROUP (a window; 0: off) and CONCBENCH_DEFER (1 or 0) give the tcc, saga and 2pc
# coordinators coordinator.WithGroupCommit(window) and coordinator.WithDeferredFinish(on or off),
# CONCBENCH_VOTES=1 or 0 the 2pc coordinator twopc.WithVoteMarkers(on or off); unset, their
# defaults (group commit 2ms, deferred finish on, vote markers on; CONCBENCH_GROUP=0
# CONCBENCH_DEFER=0 measures both off).
CONCBENCH_GROUP ?=
CONCBENCH_DEFER ?=
CONCBENCH_VOTES ?=
# CONCBENCH_FLOOR=1 adds the floor side to the recipes that have one (bench-floor).
CONCBENCH_FLOOR ?=
bench-concurrency: up ## the recipes at 1/16/64 clients against their bare baselines, with PostgreSQL's ceiling: one table
	@set -o pipefail; $(WITH_ENV) TXKIT_CONCBENCH_BLOCK=$(CONCBENCH_BLOCK) TXKIT_CONCBENCH_PGBENCH=$(CONCBENCH_PGBENCH) \
	  TXKIT_CONCBENCH_GROUP=$(CONCBENCH_GROUP) TXKIT_CONCBENCH_DEFER=$(CONCBENCH_DEFER) TXKIT_CONCBENCH_VOTES=$(CONCBENCH_VOTES) \
	  TXKIT_CONCBENCH_FLOOR=$(CONCBENCH_FLOOR) $(GO) test -run '^$$' -bench '$(CONCBENCH_RUN)' -benchtime=$(CONCBENCH_ROUNDS)x -count=1 -timeout 30m ./bench/concbench/ 2>&1 | \
	  $(GO) run ./bench/benchtable

# The recipes whose rows depend on writes of their own (TCC, saga and their gRPC forms, 2PC, relay,
# notify) with a third side in the rotation: the floor, bare plus the writes txkit's guarantees
# need, by hand (bench/concbench/floor_test.go). A second table prints txkit/floor (what txkit
# costs beyond those writes) and floor/bare (the most they leave for txkit/bare). About 9 minutes.
bench-floor: up ## the recipes with writes of their own against bare and against the same writes by hand (the floor): two tables
	@$(MAKE) --no-print-directory -o up bench-concurrency CONCBENCH_FLOOR=1 CONCBENCH_RUN='Concurrency/^(tcc|saga|tcc-grpc|saga-grpc|2pc|relay|notify)$$/'

# The coordinator log over 1, 2 and 3 PostgreSQL servers (coordinator/shard; TXKIT_PG_URL's and
# deploy/local/pg-shards' two), TCC and sagas in one run: tx/s, commits and each shard server's
# CPU per transaction (docs/coordinators.md, "Log shards"). SHARDBENCH_TIME per row.
SHARDBENCH_TIME ?= 5s
.PHONY: bench-shards
bench-shards: up ## TCC and saga throughput with 1, 2 and 3 log shards (each its own PostgreSQL), per-shard CPU and commits per transaction
	@$(WITH_ENV) $(GO) test -run '^$$' -bench 'BenchmarkShards$$' -benchtime=$(SHARDBENCH_TIME) -count=1 -timeout 30m ./bench/shardbench/

# The lock backends side by side, in one run on the same servers: throughput, hand-off latency and
# round trips (BenchmarkLocks), SIGKILLed holder to next holder (BenchmarkLocksKill), and what a
# server restart does to a held lock (BenchmarkDisruptiveLocksRestart restarts a ZooKeeper node,
# PostgreSQL and Redis: run it when nothing else uses them). benchtable prints the table.
bench-locks: up ## compare the lock backends (ZooKeeper, PostgreSQL, Redis, Redlock) and print the table
	@set -o pipefail; $(WITH_ENV) { $(GO) test -run '^$$' -bench 'BenchmarkLocks$$' -count=1 $(BENCHFLAGS) ./bench/lockbench/ && \
	  $(GO) test -run '^$$' -bench 'BenchmarkLocksKill|BenchmarkDisruptiveLocksRestart' -benchtime=3x -count=1 ./bench/lockbench/; } 2>&1 | $(GO) run ./bench/benchtable

# The examples' generated gRPC code is committed (tests need no protoc). `make proto` makes it again
# after a change to a .proto: protoc from Debian's protobuf-compiler (apt-get install
# protobuf-compiler), the two Go plugins at the versions below, built into $(TXKIT_HOME)/bin.
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
PROTO_DIRS := examples/tcc-order/shoppb
proto: ## regenerate the examples' gRPC code from their .proto files (protoc from protobuf-compiler)
	@command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler"; exit 1; }
	@mkdir -p $(TXKIT_HOME)/bin && GOBIN=$(TXKIT_HOME)/bin $(GO) install $(PROTOC_GEN_GO) && GOBIN=$(TXKIT_HOME)/bin $(GO) install $(PROTOC_GEN_GO_GRPC)
	@for d in $(PROTO_DIRS); do \
	  protoc --plugin=protoc-gen-go=$(TXKIT_HOME)/bin/protoc-gen-go --plugin=protoc-gen-go-grpc=$(TXKIT_HOME)/bin/protoc-gen-go-grpc \
	    -I $$d --go_out=$$d --go_opt=paths=source_relative --go-grpc_out=$$d --go-grpc_opt=paths=source_relative $$d/*.proto || exit 1; \
	  echo "generated $$d"; done

lint: ## go vet, gofmt and staticcheck
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to rewrite:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...

recharge: up ## the notify example: recharge and account services, retried and lost notifications, reconciliation through the query API
	@$(WITH_ENV) $(GO) run ./drills/recharge

stock: up ## the stock-deduction example (per-SKU lock, operation ids, SIGKILLed holders) on every lock backend, then without a lock (its checks must fail); prints backend | orders/s | p99 | kill->answer | checks
	@$(WITH_ENV) mkdir -p $(TXKIT_HOME)/stock && $(GO) build -o $(TXKIT_HOME)/stock/demo ./drills/stock && \
	sum=$$(mktemp) && rc=0; \
	for l in zk zk-unfair pg redis redlock; do $(TXKIT_HOME)/stock/demo -lock $$l -summary $$sum || rc=1; done; \
	$(TXKIT_HOME)/stock/demo -lock none -expect-fail -summary $$sum || rc=1; \
	printf '\n%-10s | %8s | %8s | %12s | %s\n' backend orders/s p99 'kill->answer' checks; cat $$sum; rm -f $$sum; exit $$rc

CONSOLE_LISTEN ?= 127.0.0.1:8089
console: up ## the tcc-order example with orders, a dead outbox message and `txkit serve` (admin API + web console) on $(CONSOLE_LISTEN); prints the URL and the token; Ctrl-C stops it
	@$(WITH_ENV) mkdir -p $(TXKIT_HOME)/console && $(GO) build -o $(TXKIT_HOME)/console/demo ./drills/console && \
	$(TXKIT_HOME)/console/demo -listen $(CONSOLE_LISTEN)

console-screenshot: up ## run the console's browser test (headless Chromium) and copy its overview screenshot to docs/console.png
	@$(WITH_ENV) $(GO) test -count=1 -run 'TestIntegrationConsoleBrowser$$' ./admin/console/ -args -update
