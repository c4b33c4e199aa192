package outbox

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func TestStatusString(t *testing.T) {
	tests := []struct {
		name string
		s    Status
		want string
	}{
		{"pending", StatusPending, "pending"},
		{"dead", StatusDead, "dead"},
		{"zero", 0, "Status(0)"},
		{"unknown", 9, "Status(9)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.String(); got != tc.want {
				t.Fatalf("String() = %q, want %q", got, tc.want)
			}
			back, err := ParseStatus(tc.want)
			valid := tc.s == StatusPending || tc.s == StatusDead
			if valid && (err != nil || back != tc.s) {
				t.Fatalf("ParseStatus(%q) = %v, %v; want %v", tc.want, back, err, tc.s)
			}
			if !valid && err == nil {
				t.Fatalf("ParseStatus(%q) = %v, want an error", tc.want, back)
			}
		})
	}
}

func TestStatusTransitions(t *testing.T) {
	tests := []struct {
		name     string
		from, to Status
		want     bool
	}{
		{"retry after a failure", StatusPending, StatusPending, true},
		{"give up", StatusPending, StatusDead, true},
		{"requeue", StatusDead, StatusPending, true},
		{"dead stays dead", StatusDead, StatusDead, false},
		{"unknown status", 0, StatusPending, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.from.canBecome(tc.to); got != tc.want {
				t.Fatalf("%v.canBecome(%v) = %v, want %v", tc.from, tc.to, got, tc.want)
			}
		})
	}
}

// TestStatementsFollowTransitions checks the statements that change a status against the
// transitions table: each names the status it moves from in its where clause and only statuses
// that status may become in its set clause.
func TestStatementsFollowTransitions(t *testing.T) {
	ob, err := New(&pgxpool.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		sql  string
		from Status
		to   []Status
	}{
		{"fail", ob.q.fail, StatusPending, []Status{StatusPending, StatusDead}},
		{"requeue", ob.q.requeue, StatusDead, []Status{StatusPending}},
		{"requeue all", ob.q.requeueAll, StatusDead, []Status{StatusPending}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set, where, ok := strings.Cut(tc.sql, "where")
			if !ok {
				t.Fatalf("no where clause in %s", tc.sql)
			}
			if !strings.Contains(where, "status = '"+tc.from.String()+"'") {
				t.Errorf("where clause does not require status %v: %s", tc.from, where)
			}
			for _, s := range []Status{StatusPending, StatusDead} {
				mentioned := strings.Contains(set, "'"+s.String()+"'")
				if mentioned && !tc.from.canBecome(s) {
					t.Errorf("sets status %v, which %v may not become", s, tc.from)
				}
			}
			for _, s := range tc.to {
				if !strings.Contains(set, "'"+s.String()+"'") {
					t.Errorf("does not set status %v: %s", s, set)
				}
			}
		})
	}
}
