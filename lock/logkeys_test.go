package lock_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock/pglock"
)

// An application that logs JSON with its own "id" on the logger it gives txkit gets lines without
// duplicate keys (txkit's keys begin with "txkit."), and an election shared by two components
// logs "elected leader" once per term.
func TestIntegrationElectionLogOncePerTermNoDuplicateKeys(t *testing.T) {
	var buf coretest.LogBuffer // safe for the logger's goroutines
	app := slog.New(slog.NewJSONHandler(&buf, nil)).With("id", "app-request-7")
	c, err := pglock.New(testenv.PG(t).Pool, pglock.WithLogger(app))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	el, err := c.NewElector("pg-leader-log", "candidate-a")
	if err != nil {
		t.Fatal(err)
	}
	for term := 0; term < 2; term++ {
		relay, err := el.Campaign(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		recovery, err := el.Campaign(t.Context()) // a second job joins the term
		if err != nil {
			t.Fatal(err)
		}
		if err := relay.Resign(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := recovery.Resign(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	var elected int
	for line := range strings.Lines(buf.String()) {
		if dup := duplicateKey(t, line); dup != "" {
			t.Errorf("duplicate key %q in %s", dup, line)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if v["id"] != "app-request-7" {
			t.Errorf("the application's id is %v in %s", v["id"], line)
		}
		if v["msg"] == "elected leader" {
			elected++
			if v["txkit.id"] != "candidate-a" || v["txkit.path"] != "pg-leader-log" || v["txkit.token"] == nil {
				t.Errorf("elected leader line without txkit.id, txkit.path, txkit.token: %s", line)
			}
		}
	}
	if elected != 2 {
		t.Fatalf("%d elected leader lines for 2 terms of 2 components each, want 2:\n%s", elected, buf.String())
	}
}

// duplicateKey returns a key that occurs twice in one object of the JSON line, or "".
func duplicateKey(t *testing.T, line string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	var walk func() string
	walk = func() string { // reads one value
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				if seen[k.(string)] {
					return k.(string)
				}
				seen[k.(string)] = true
				if d := walk(); d != "" {
					return d
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if d := walk(); d != "" {
					return d
				}
			}
			_, _ = dec.Token()
		}
		return ""
	}
	return walk()
}
