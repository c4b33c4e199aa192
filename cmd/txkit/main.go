// Command txkit is the operator's tool for txkit's tables: the outbox's backlog and dead letters,
// the global transactions of the tcc, saga, twopc, threepc and workflow coordinators, and the failed notifications.
//
//	txkit outbox backlog [-pg URL] [-schema S] [-table T]
//	txkit outbox dead    [-pg URL] [-schema S] [-table T] [-limit N]
//	txkit outbox requeue [-pg URL] [-schema S] [-table T] (-all | ID...)
//	txkit tx list        [-pg URL] [-schema S] [-prefix P] [-kind K] [-status S] [-unfinished] [-older-than D] [-limit N]
//	txkit tx show GID    [-pg URL] [-schema S] [-prefix P] [-reveal]
//	txkit tx resume GID  [-pg URL] [-schema S] [-prefix P]
//	                     (tx list, show and resume also [-log-shard-file F ...]: the log's other shards)
//	txkit notify failed  [-pg URL] [-schema S] [-table T] [-limit N]
//	txkit notify show ID [-pg URL] [-schema S] [-table T] [-reveal]
//	txkit notify redeliver ID... [-pg URL] [-schema S] [-table T]
//
//	txkit fence show     [-pg URL] [-schema S] [-table T] [-resource R] [-path P [-zk ADDRS]]
//	txkit fence reset    -resource R -path P [-zk ADDRS] [-pg URL] [-schema S] [-table T]
//
//	txkit serve [-listen 127.0.0.1:8089] [-listen-public] [-host NAME ...] [-tls-cert F -tls-key F]
//	            [-pg-file F] [-schema S] [-token-file F] [-zk ADDRS] [-election name=where ...]
//	            [-lock name=where ...] [-metrics-url URL ...] [-log-shard-file F ...]
//	            [-request-timeout D] [-max-requests N] [-max-conns N] [-audit-retention D]
//	txkit audit purge [-pg URL] [-schema S] [-table T] [-older-than 720h]
//	txkit help [COMMAND [VERB]]
//
// Flags may come before or after a command's arguments (txkit tx show GID -schema S); "--" ends
// them. `txkit COMMAND -h` and `txkit help COMMAND` print that command's flags only.
//
// The tx, outbox and notify commands and serve's JSON API and console share one implementation
// of every query: package admin. Requeue, redeliver, resume and reveals are recorded in admin's
// audit table (actor "cli:$USER", or "cli:$TXKIT_ACTOR").
//
// The PostgreSQL URL comes from -pg, or from the file named by -pg-file, or from $TXKIT_PG_URL. A
// URL with a password given with -pg shows in the process list to every user of the machine: use
// $TXKIT_PG_URL or -pg-file (readable only by you) for one. ZooKeeper addresses come from -zk or
// $TXKIT_ZK, and its credentials (the digest user's "user:password") from $TXKIT_ZK_AUTH. Text
// read from the tables (errors, keys, payloads) is printed with control characters escaped (),
// so that it cannot drive the terminal.
//
// The exit status is 0 on success, 1 when the command failed (or requeue found fewer dead messages
// than IDs given, or reset found nothing to reset), and 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command, minus the process: it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmds := commands()
	err := dispatch(ctx, cmds, args, &env{getenv: getenv, stdout: stdout, stderr: stderr})
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		var h *helpError
		if errors.As(err, &h) { // -h after a command, txkit help COMMAND: that command's help only
			cmds = selected(cmds, h.name)
		}
		fmt.Fprint(stdout, help(cmds))
		return exitOK
	case errors.As(err, new(*usageError)):
		fmt.Fprintf(stderr, "txkit: %v\n\n%s", err, help(cmds))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "txkit: %s\n", printable(err.Error()))
		return exitFail
	}
}

// commands is txkit's table of subcommands, in the order `txkit help` lists them: the commands of
// a group are next to each other and share its flags (see [command]).
func commands() []command {
	return []command{
		{"outbox backlog", "", "count pending and dead messages", outboxFlags, nil, outboxBacklog},
		{"outbox dead", "[-limit N]", "list dead messages, oldest first", outboxFlags, limitFlag("dead messages"), outboxDead},
		{"outbox requeue", "ID... | -all", "make dead messages pending again", outboxFlags, requeueFlags, outboxRequeue},

		{"tx list", "[-kind K] [-status S] [-unfinished] ...", "global transactions, in gid order", txFlags, txListFlags, txList},
		{"tx show", "GID [-reveal]", "one global transaction and its branches (a workflow's steps); payloads\n" +
			"redacted unless -reveal", txFlags, revealFlag, txShow},
		{"tx resume", "GID", "run a stopped workflow again (its leader replays it with the code deployed now)", txFlags, nil, txResume},

		{"notify failed", "[-limit N]", "notifications that ran out of attempts", notifyFlags, limitFlag("notifications"), notifyFailed},
		{"notify show", "ID [-reveal]", "one notification and its attempts; its payload redacted unless -reveal",
			notifyFlags, revealFlag, notifyShow},
		{"notify redeliver", "ID...", "put failed notifications back on the schedule", notifyFlags, nil, notifyRedeliver},

		{"fence show", "[-resource R] [-path P]", "the highest fencing token per resource; with -path, the lock path's epoch\n" +
			"and the resources recorded above it (every holder of P is refused there)", fenceFlags, fenceVerbFlags, fenceShow},
		{"fence reset", "-resource R -path P", "forget R's token if its epoch is above lock path P's (after the\n" +
			"ensemble was rebuilt from empty data, which fences every leader)", fenceFlags, fenceVerbFlags, fenceReset},

		{"serve", "", "the admin JSON API (/api/) and the web console (/) on one listener, until SIGTERM",
			serveFlagSet, nil, serve},

		{"audit purge", "[-older-than D]", "delete the audit rows older than -older-than (more than the 5m HMAC window)",
			auditFlags, nil, auditPurge},
	}
}

// limitFlag is the -limit flag of a command that lists things.
func limitFlag(what string) func(fs *flag.FlagSet, e *env) {
	return func(fs *flag.FlagSet, e *env) { fs.IntVar(&e.limit, "limit", 50, "list at most `N` "+what) }
}
