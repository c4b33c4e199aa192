package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
)

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "broker refused: timeout", "broker refused: timeout"},
		{"unicode letters", "délai dépassé — 超时", "délai dépassé — 超时"},
		{"escape sequences", "\x1b]0;owned\x07\x1b[2Jdone", `\x1b]0;owned\a\x1b[2Jdone`},
		{"carriage return", "ok\rfake", `ok\rfake`},
		{"C1 control", "a\u009bb", `a\u009bb`},
		{"bidi override", "user\u202egnp.exe", `user\u202egnp.exe`},
		{"invalid UTF-8", "a\xffb", `a\xffb`},
		{"backslash", `C:\x1b`, `C:\\x1b`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := printable(tc.in); got != tc.want {
				t.Fatalf("printable(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestIntegrationStoredTextIsEscaped: a last error stored with terminal escape sequences (which a
// failing broker or receiver can put there) is printed escaped, never raw.
func TestIntegrationStoredTextIsEscaped(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := ob.Enqueue(ctx, pg.Pool, outbox.Message{Topic: "orders", Key: "k", Body: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	const hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[1;1Hall good\r"
	if _, err := pg.Pool.Exec(ctx, `update `+pgx.Identifier{pg.Name, outbox.DefaultTable}.Sanitize()+
		` set status = 'dead', attempts = 16, last_error = $1 where msg_id = $2`, hostile, id); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TXKIT_PG_URL": testenv.PGURL(t)}
	code, out, errOut := txkit(t, env, "outbox", "dead", "-schema", pg.Name)
	if code != exitOK {
		t.Fatalf("outbox dead: exit %d\n%s%s", code, out, errOut)
	}
	if strings.ContainsAny(out, "\x1b\x07\r") {
		t.Fatalf("control characters printed raw: %q", out)
	}
	if !strings.Contains(out, `\x1b]0;pwned\a\x1b[2J\x1b[1;1Hall good`) {
		t.Fatalf("the stored error is not shown escaped: %q", out)
	}
}

// TestIntegrationPGURLFromFile: the URL (and its password) can come from a file instead of the
// command line, where every user of the machine sees it.
func TestIntegrationPGURLFromFile(t *testing.T) {
	pg := testenv.PG(t)
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "pg-url")
	if err := os.WriteFile(file, []byte(testenv.PGURL(t)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"outbox", "backlog", "-schema", pg.Name, "-pg-file", file},
		{"outbox", "-pg-file", file, "dead", "-schema", pg.Name},
		{"tx", "list", "-schema", pg.Name, "-pg-file", file},
		{"notify", "failed", "-schema", pg.Name, "-pg-file", file},
		{"fence", "show", "-schema", pg.Name, "-pg-file", file},
	} {
		code, out, errOut := txkit(t, nil, cmd...)
		// tx, notify and fence find no tables in this schema: a failure that shows the connection worked.
		if code == exitUsage || strings.Contains(errOut, "connect to PostgreSQL") ||
			(cmd[0] == "outbox" && code != exitOK) {
			t.Errorf("%q: exit %d\n%s%s", cmd, code, out, errOut)
		}
	}
	code, _, errOut := txkit(t, nil, "outbox", "backlog", "-pg", "postgres://x", "-pg-file", file)
	if code != exitUsage || !strings.Contains(errOut, "not both") {
		t.Errorf("-pg with -pg-file: exit %d, %q; want a usage error", code, errOut)
	}
	code, _, errOut = txkit(t, nil, "outbox", "backlog", "-pg-file", filepath.Join(t.TempDir(), "missing"))
	if code != exitFail || !strings.Contains(errOut, "-pg-file") {
		t.Errorf("missing -pg-file: exit %d, %q", code, errOut)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = txkit(t, nil, "outbox", "backlog", "-pg-file", empty)
	if code != exitFail || !strings.Contains(errOut, "want one line") {
		t.Errorf("empty -pg-file: exit %d, %q", code, errOut)
	}
}

// txkit audit purge deletes the audit rows older than -older-than, and refuses an age within the
// HMAC window (the nonces of signatures that still verify).
func TestIntegrationAuditPurgeCommand(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	a, err := admin.New(pg.Pool, admin.WithSchema(pg.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 { // no outbox table: each fails, and is recorded all the same
		_ = a.Requeue(ctx, "script", uuid.New())
	}
	table := pgx.Identifier{pg.Name, admin.DefaultAuditTable}.Sanitize()
	if _, err := pg.Pool.Exec(ctx, `update `+table+` set at = now() - interval '800 hours'
where id in (select id from `+table+` order by id limit 2)`); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TXKIT_PG_URL": testenv.PGURL(t)}
	code, out, errOut := txkit(t, env, "audit", "purge", "-schema", pg.Name, "-older-than", "720h")
	if code != exitOK || !strings.Contains(out, "purged 2 audit rows older than 720h0m0s") {
		t.Fatalf("audit purge: exit %d\n%s%s", code, out, errOut)
	}
	var left int
	if err := pg.Pool.QueryRow(ctx, `select count(*) from `+table).Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d rows left (%v), want 1", left, err)
	}
	code, _, errOut = txkit(t, env, "audit", "purge", "-schema", pg.Name, "-older-than", "1m")
	if code != exitUsage || !strings.Contains(errOut, "-older-than 1m0s: must be longer than the HMAC window") {
		t.Fatalf("audit purge -older-than 1m: exit %d, %q", code, errOut)
	}
	code, _, errOut = txkit(t, env, "audit", "list")
	if code != exitUsage || !strings.Contains(errOut, `unknown verb "list"`) {
		t.Fatalf("audit list: exit %d, %q", code, errOut)
	}
}
