package admin_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/lock"
)

func TestNewOptions(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var insp lock.Inspector
	for _, tc := range []struct {
		name string
		opts []admin.Option
		want string // "" for no error
	}{
		{"defaults", nil, ""},
		{"everything", []admin.Option{admin.WithSchema("ops"), admin.WithTables(admin.Tables{Logs: []admin.LogSource{{Name: "orders", Prefix: "orders_"}}}),
			admin.WithTables(admin.Tables{Outbox: "events", Notify: "callbacks", Audit: "audit"}),
			admin.WithTokens(map[string]string{"oncall": "0123456789abcdef"}, nil), admin.WithHMACSecrets("robot", "fedcba9876543210"),
			admin.WithLogger(slog.Default())}, ""},
		{"bad schema", []admin.Option{admin.WithSchema("")}, ""}, // "" means the search_path
		{"long schema", []admin.Option{admin.WithSchema(strings.Repeat("s", 64))}, "schema"},
		{"bad outbox table", []admin.Option{admin.WithTables(admin.Tables{Outbox: strings.Repeat("o", 64)})}, "outbox: table"},
		{"bad notify table", []admin.Option{admin.WithTables(admin.Tables{Notify: strings.Repeat("n", 60)})}, "notify: table"},
		{"bad audit table", []admin.Option{admin.WithTables(admin.Tables{Audit: strings.Repeat("a", 60)})}, "audit table"},
		{"bad log prefix", []admin.Option{admin.WithTables(admin.Tables{Logs: []admin.LogSource{{Name: "x", Prefix: strings.Repeat("p", 60)}}})}, "log x"},
		{"two logs one name", []admin.Option{admin.WithTables(admin.Tables{Logs: []admin.LogSource{{Name: "x", Prefix: "a_"}, {Name: "x", Prefix: "b_"}}})}, "used twice"},
		{"short token", []admin.Option{admin.WithTokens(map[string]string{"oncall": "short"}, nil)}, "shorter than 16"},
		{"shared token", []admin.Option{admin.WithTokens(map[string]string{"a": "0123456789abcdef", "b": "0123456789abcdef"}, nil)}, "token of b: given to a too"},
		{"shared HMAC secret", []admin.Option{admin.WithHMACSecrets("robot-b", "0123456789abcdef"),
			admin.WithHMACSecrets("robot-a", "fedcba9876543210", "0123456789abcdef")}, "HMAC secret of robot-b: given to robot-a too"},
		{"HMAC secret that is a token", []admin.Option{admin.WithTokens(map[string]string{"oncall": "0123456789abcdef"}, nil),
			admin.WithHMACSecrets("robot", "0123456789abcdef")}, "HMAC secret of robot: given to oncall too"},
		{"one actor, token and secret", []admin.Option{admin.WithTokens(map[string]string{"robot": "0123456789abcdef"}, nil),
			admin.WithHMACSecrets("robot", "fedcba9876543210")}, ""},
		{"token actor named like the CLI", []admin.Option{admin.WithTokens(map[string]string{"cli:alice": "0123456789abcdef"}, nil)},
			`token of "cli:alice": the prefix "cli:" is the txkit command's`},
		{"HMAC actor named like the CLI", []admin.Option{admin.WithHMACSecrets("cli:bot", "0123456789abcdef")}, `HMAC secrets of "cli:bot"`},
		{"empty actor", []admin.Option{admin.WithTokens(map[string]string{"": "0123456789abcdef"}, nil)}, "empty actor name"},
		{"rate limit off", []admin.Option{admin.WithRateLimit(0, 0)}, ""},
		{"rate without burst", []admin.Option{admin.WithRateLimit(1, 0)}, "rate limit"},
		{"negative rate", []admin.Option{admin.WithRateLimit(-1, 5)}, "rate limit"},
		{"retention within the HMAC window", []admin.Option{admin.WithAuditRetention(admin.DefaultHMACWindow, "@every 1h")}, "audit retention 5m0s: must be longer"},
		{"bad purge schedule", []admin.Option{admin.WithAuditRetention(time.Hour, "sometimes")}, "audit purge schedule"},
		{"short secret", []admin.Option{admin.WithHMACSecrets("robot", "short")}, "HMAC secrets of robot"},
		{"no secret", []admin.Option{admin.WithHMACSecrets("robot")}, "no secret"},
		{"election without inspector", []admin.Option{admin.WithInspected([]admin.Election{{Name: "tcc", Path: "/tcc", Inspector: insp}}, nil)}, "election"},
		{"lock without path", []admin.Option{admin.WithInspected(nil, []admin.Lock{{Name: "jobs"}})}, "lock"},
		{"nil logger", []admin.Option{admin.WithLogger(nil)}, "nil logger"},
		{"nil clock", []admin.Option{admin.ClockForTest(nil)}, "nil clock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := admin.New(pool, tc.opts...)
			if tc.want == "" {
				if err != nil || a == nil {
					t.Fatalf("New = %v", err)
				}
				return
			}
			if !errors.Is(err, admin.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want ErrInvalidOption saying %q", err, tc.want)
			}
		})
	}
	if _, err := admin.New(nil); !errors.Is(err, admin.ErrInvalidOption) {
		t.Fatalf("New(nil) = %v", err)
	}
}

func TestTxFilterCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    admin.TxFilter
		want string
	}{
		{"zero", admin.TxFilter{}, ""},
		{"all set", admin.TxFilter{Kind: "saga", Status: "compensated", Unfinished: true, OlderThan: 1, After: "g", Limit: 500}, ""},
		{"kind", admin.TxFilter{Kind: "xa"}, `kind "xa": want tcc, saga, 2pc, 3pc or workflow`},
		{"status", admin.TxFilter{Status: "done"}, `status "done": want one of trying, confirming`},
		{"limit", admin.TxFilter{Limit: 501}, "limit 501: must be 1..500"},
		{"negative limit", admin.TxFilter{Limit: -1}, "limit -1"},
		{"negative age", admin.TxFilter{OlderThan: -1}, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.Check()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if !errors.Is(err, admin.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v; want ErrBadRequest saying %q", err, tc.want)
			}
		})
	}
}
