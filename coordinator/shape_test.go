package coordinator_test

import (
	"context"
	"errors"
	"testing"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

// The four coordinators have one shape: Begin takes ctx first, Stats returns coordinator.Stats,
// and each is a coordinator.Base. This file compiles only while that holds.
var (
	_ func(*tcc.Coordinator, context.Context, ...coordinator.BeginOption) (*tcc.Global, error)         = (*tcc.Coordinator).Begin
	_ func(*saga.Coordinator, context.Context, ...coordinator.BeginOption) (*saga.Saga, error)         = (*saga.Coordinator).Begin
	_ func(*twopc.Coordinator, context.Context, ...coordinator.BeginOption) (*twopc.Global, error)     = (*twopc.Coordinator).Begin
	_ func(*threepc.Coordinator, context.Context, ...coordinator.BeginOption) (*threepc.Global, error) = (*threepc.Coordinator).Begin

	_ func(*tcc.Coordinator) coordinator.Stats     = (*tcc.Coordinator).Stats
	_ func(*saga.Coordinator) coordinator.Stats    = (*saga.Coordinator).Stats
	_ func(*twopc.Coordinator) coordinator.Stats   = (*twopc.Coordinator).Stats
	_ func(*threepc.Coordinator) coordinator.Stats = (*threepc.Coordinator).Stats

	_ coordinator.Base = (*tcc.Coordinator)(nil)
	_ coordinator.Base = (*saga.Coordinator)(nil)
	_ coordinator.Base = (*twopc.Coordinator)(nil)
	_ coordinator.Base = (*threepc.Coordinator)(nil)
)

// TestIntegrationBeginHonoursDoneCtx: every coordinator's Begin returns an error wrapping the
// error of a ctx already done, and records nothing (tcc's, given a gid, would write).
func TestIntegrationBeginHonoursDoneCtx(t *testing.T) {
	pool := testenv.PG(t).Pool
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for name, begin := range begins(t, pool) {
		t.Run(name, func(t *testing.T) {
			if err := begin(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Begin(done ctx) = %v, want context.Canceled", err)
			}
			if err := begin(ctx, coordinator.WithGID("done-"+name)); !errors.Is(err, context.Canceled) {
				t.Fatalf("Begin(done ctx, WithGID) = %v, want context.Canceled", err)
			}
			if err := begin(t.Context(), coordinator.WithGID("done-"+name)); err != nil { // the gid is still free
				t.Fatalf("Begin(WithGID) after the refused one = %v", err)
			}
		})
	}
}
