package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
)

// BenchmarkCall is the base's cost of one branch call, without the participant's: Base.Call
// (call timeout, panic guard, counting the call and observing its duration) on an in-process
// participant that does nothing.
//
//	go test -run '^$' -bench Call -benchtime 2s ./internal/core/
func BenchmarkCall(b *testing.B) {
	base, err := core.NewBase(testenv.PG(b).Pool, core.Protocol{Name: "tcc", Kind: core.KindTCC, Prefix: "txkit_", Timeout: time.Minute}, nil)
	if err != nil {
		b.Fatal(err)
	}
	p := participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil })
	req := participant.Request{GID: "g", Branch: "b", Op: participant.OpTry}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if err := base.Call(ctx, p, req); err != nil {
			b.Fatal(err)
		}
	}
}

// A branch call's own cost in allocations, on an in-process participant that does nothing and a
// tracer that does not record (the default): no span attributes built, the span's name and the
// metric series resolved once, no timer when ctx's deadline comes before the call timeout. What
// is left: the global tracer's non-recording span (3) and the call timeout's context (4). Before:
// 12 and 10.
func TestIntegrationCallAllocs(t *testing.T) {
	base, err := core.NewBase(testenv.PG(t).Pool, core.Protocol{Name: "tcc", Kind: core.KindTCC, Prefix: "txkit_", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil })
	req := participant.Request{GID: "g", Branch: "b", Op: participant.OpTry}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		max  float64
	}{
		{"no deadline", t.Context(), 7},
		{"earlier deadline", func() context.Context {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second) // before the call timeout (a minute)
			t.Cleanup(cancel)
			return ctx
		}(), 3},
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			if err := base.Call(tc.ctx, p, req); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s: %.1f allocations per call", tc.name, allocs)
		if allocs > tc.max {
			t.Errorf("%s: %.1f allocations per call, want at most %.0f", tc.name, allocs, tc.max)
		}
	}
}
