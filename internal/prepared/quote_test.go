package prepared_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/prepared"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// quoteCases are names of prepared transactions Quote must keep intact, the hostile ones
// included (they are refused at the API boundary, but a name read back from pg_prepared_xacts
// is whatever someone prepared).
var quoteCases = []struct{ name, in, want string }{
	{"plain", "txkit:s.p:3:abc:east", `E'txkit:s.p:3:abc:east'`},
	{"quote", "it's", `E'it''s'`},
	{"backslash", `a\b`, `E'a\\b'`},
	{"trailing backslash", `ab\`, `E'ab\\'`},
	{"backslash quote", `\'`, `E'\\'''`},
	{"stacked statement", `\'; create table pwned(); --`, `E'\\''; create table pwned(); --'`},
	{"escape sequences", `\n\t\x41\101\u0041`, `E'\\n\\t\\x41\\101\\u0041'`},
	{"doubled", `''\\`, `E'''''\\\\'`},
	{"unicode", "überweisung→ost", `E'überweisung→ost'`},
}

func TestQuote(t *testing.T) {
	for _, tc := range quoteCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := prepared.Quote(tc.in); got != tc.want {
				t.Fatalf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

// TestIntegrationQuoteBothSettings: PostgreSQL reads every quoted name back as it was, as one
// statement, with standard_conforming_strings on and off, over the simple protocol (the one
// PREPARE TRANSACTION and COMMIT PREPARED go by: pgx sends a statement without arguments that
// way).
func TestIntegrationQuoteBothSettings(t *testing.T) {
	s := testenv.PG(t)
	for _, scs := range []string{"on", "off"} {
		t.Run("standard_conforming_strings="+scs, func(t *testing.T) {
			ctx := t.Context()
			cfg, err := pgx.ParseConfig(s.URL)
			if err != nil {
				t.Fatal(err)
			}
			cfg.RuntimeParams["standard_conforming_strings"] = scs
			cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if got := conn.PgConn().ParameterStatus("standard_conforming_strings"); got != scs {
				t.Fatalf("standard_conforming_strings = %q, want %q", got, scs)
			}
			for _, tc := range quoteCases {
				res, err := conn.PgConn().Exec(ctx, "select "+prepared.Quote(tc.in)).ReadAll()
				switch {
				case err != nil:
					t.Errorf("%s: select %s: %v", tc.name, prepared.Quote(tc.in), err)
				case len(res) != 1 || len(res[0].Rows) != 1:
					t.Errorf("%s: select %s ran %d statements, want 1", tc.name, prepared.Quote(tc.in), len(res))
				case string(res[0].Rows[0][0]) != tc.in:
					t.Errorf("%s: select %s = %q, want %q", tc.name, prepared.Quote(tc.in), res[0].Rows[0][0], tc.in)
				}
			}
			res, err := conn.PgConn().Exec(ctx, "select to_regclass('pwned')::text").ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if v := res[0].Rows[0][0]; v != nil {
				t.Errorf("a quoted name created table %s", v)
			}
		})
	}
}
