package saga_test

import (
	"context"
	"testing"

	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/participant"
)

// A three-step sequential saga's cost in Go allocations, counted with testing.AllocsPerRun (every
// goroutine of the process: the group writer's and pgx's included) around Begin, three Adds and
// Submit against the real PostgreSQL, on an in-process participant that does nothing: what the
// coordinator allocates per saga (the log's two writes, the walk, the three calls). Issue 33:
// 153 before the cuts (the saga's logger made per saga, the walk's maps, Add's dependency set,
// json.Marshal of the dependencies, the record's branch arrays), 115 after, 93 with the log's
// arguments unboxed (internal/core/args.go); the bound (105) leaves room for the pools' and the
// runtime's own goroutines, counted too.
func TestIntegrationSagaAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	e := newEnv(t)
	c := e.coordinator()
	p := register(t, c, "p", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))
	steps := sequential(p, 3)
	ctx := t.Context()
	run := func() {
		s, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			if err := s.Add(st); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Submit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	coretest.AllocsAtMost(t, "saga", 300, 105, run)
}
