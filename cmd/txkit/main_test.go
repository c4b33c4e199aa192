package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// txkit runs the command with args and the environment env, and returns its exit status and output.
func txkit(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsage(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantErr  string
	}{
		{"no command", nil, nil, exitUsage, "no command"},
		{"unknown command", []string{"frobnicate"}, nil, exitUsage, `unknown command "frobnicate"`},
		{"no verb", []string{"outbox"}, nil, exitUsage, "no verb"},
		{"unknown verb", []string{"outbox", "purge"}, nil, exitUsage, `unknown verb "purge"`},
		{"unknown flag", []string{"outbox", "dead", "-x"}, nil, exitUsage, "flag provided but not defined"},
		{"bad limit", []string{"outbox", "dead", "-limit", "0"}, nil, exitUsage, "-limit 0"},
		{"requeue nothing", []string{"outbox", "requeue"}, nil, exitUsage, "IDs or -all"},
		{"requeue both", []string{"outbox", "requeue", "-all", uuid.NewString()}, nil, exitUsage, "IDs or -all"},
		{"requeue bad id", []string{"outbox", "requeue", "nope"}, nil, exitUsage, `"nope" is not a message ID`},
		{"no url", []string{"outbox", "backlog"}, nil, exitUsage, "TXKIT_PG_URL"},
		{"bad table", []string{"outbox", "backlog", "-pg", "postgres://x", "-table", ""}, nil, exitUsage, "table"},
		{"backlog takes no arguments", []string{"outbox", "backlog", "extra"}, nil, exitUsage, "unexpected arguments"},
		{"unreachable server", []string{"outbox", "-pg", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "backlog"}, nil,
			exitFail, "connect to PostgreSQL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := txkit(t, tc.env, tc.args...)
			if code != tc.wantCode || !strings.Contains(stderr, tc.wantErr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.wantCode, tc.wantErr)
			}
			if tc.wantCode == exitUsage && !strings.Contains(stderr, "usage: txkit") {
				t.Fatalf("no usage text on a usage error: %q", stderr)
			}
		})
	}
	code, stdout, _ := txkit(t, nil, "-h")
	if code != exitOK || !strings.Contains(stdout, "outbox requeue") {
		t.Fatalf("-h: exit %d, stdout %q", code, stdout)
	}
}

// `txkit COMMAND -h` and `txkit help COMMAND [VERB]` print that command's usage only.
func TestHelpOfOneCommand(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		want, not []string
	}{
		{"serve -h", []string{"serve", "-h"}, []string{"-listen", "-election"}, []string{"outbox requeue", "tx show", "-reveal"}},
		{"help serve", []string{"help", "serve"}, []string{"-listen", "-metrics-url"}, []string{"outbox requeue", "fence reset"}},
		{"help tx show", []string{"help", "tx", "show"}, []string{"tx show", "-prefix"}, []string{"tx list", "-unfinished", "-listen"}},
		{"help tx", []string{"help", "tx"}, []string{"tx show", "tx list", "-unfinished"}, []string{"outbox", "-listen"}},
		{"tx show -h", []string{"tx", "show", "-h"}, []string{"tx show", "-prefix"}, []string{"tx list", "-listen"}},
		{"tx show GID -h", []string{"tx", "show", "some-gid", "-h"}, []string{"tx show"}, []string{"-listen"}},
		{"outbox -h", []string{"outbox", "-h"}, []string{"outbox requeue", "outbox dead"}, []string{"tx show", "-listen"}},
		{"help", []string{"help"}, []string{"outbox requeue", "tx show", "-listen"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := txkit(t, nil, tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("no %q in\n%s", w, stdout)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(stdout, n) {
					t.Errorf("%q in\n%s", n, stdout)
				}
			}
		})
	}
	code, _, stderr := txkit(t, nil, "help", "frobnicate")
	if code != exitUsage || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("help frobnicate: exit %d, %q", code, stderr)
	}
}

func TestIntegrationOutboxCommands(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, "events"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for i := range 3 {
		id, err := ob.Enqueue(ctx, pg.Pool, outbox.Message{Topic: "orders", Key: "order-" + string(rune('a'+i)), Body: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	tbl := pgx.Identifier{pg.Name, "events"}.Sanitize()
	if _, err := pg.Pool.Exec(ctx, `update `+tbl+` set status = 'dead', attempts = 16, last_error = e'broker\nrefused'
		where msg_id = any($1)`, ids[:2]); err != nil {
		t.Fatal(err)
	}
	// The URL comes from the environment; schema and table from flags, before or after the verb.
	env := map[string]string{"TXKIT_PG_URL": testenv.PGURL(t)}
	flags := []string{"-schema", pg.Name, "-table", "events"}

	code, out, errOut := txkit(t, env, append([]string{"outbox", "backlog"}, flags...)...)
	if code != exitOK || !regexpMatch(out, `pending\s+1\n`) || !regexpMatch(out, `dead\s+2\n`) {
		t.Fatalf("backlog: exit %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = txkit(t, env, append(append([]string{"outbox"}, flags...), "dead", "-limit", "1")...)
	if code != exitOK || !strings.Contains(out, ids[0].String()) || strings.Contains(out, ids[1].String()) ||
		!strings.Contains(out, "broker refused") || !strings.Contains(out, "-limit shows more") {
		t.Fatalf("dead -limit 1: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("txkit outbox dead:\n%s", out)

	// One dead and one pending ID: one requeued, exit status 1.
	code, out, errOut = txkit(t, env, append(append([]string{"outbox"}, flags...), "requeue", ids[0].String(), ids[2].String())...)
	if code != exitFail || !strings.Contains(out, "requeued 1 of 2") || !strings.Contains(errOut, "1 of the IDs") {
		t.Fatalf("requeue: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = txkit(t, env, append(append([]string{"outbox"}, flags...), "requeue", "-all")...)
	if code != exitOK || !strings.Contains(out, "requeued 1 dead messages") {
		t.Fatalf("requeue -all: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = txkit(t, env, append([]string{"outbox", "dead"}, flags...)...)
	if code != exitOK || !strings.Contains(out, "no dead messages") {
		t.Fatalf("dead after requeue: exit %d\n%s%s", code, out, errOut)
	}
	// A table that does not exist is a failure, not a usage error.
	code, _, errOut = txkit(t, env, "outbox", "backlog", "-schema", pg.Name, "-table", "missing")
	if code != exitFail || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("missing table: exit %d, %s", code, errOut)
	}
}

func regexpMatch(s, re string) bool { return regexp.MustCompile(re).MatchString(s) }
