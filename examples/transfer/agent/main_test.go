package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/threepc/agent"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// TestRunRefusesBadFlags: a database other than east or west, or an unknown termination mode, is
// refused before anything connects.
func TestRunRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    config
		want string
	}{
		{"unknown database", config{db: "north", termination: "consult-log"}, `-db "north"`},
		{"no database", config{termination: "consult-log"}, `-db ""`},
		{"unknown mode", config{db: "east", termination: "optimistic"}, "optimistic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.pg, tc.c.schema, tc.c.timeout, tc.c.poll = "postgres://127.0.0.1:1/none", "x", time.Second, time.Second
			err := run(t.Context(), tc.c, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v; want an error naming %s", err, tc.want)
			}
			if tc.name == "unknown mode" && !errors.Is(err, agent.ErrInvalidOption) {
				t.Fatalf("run = %v; want agent.ErrInvalidOption", err)
			}
		})
	}
}
