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
