//go:build drill

package main

import (
	"context"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
)

// drillBuild: the drills' build of the bank (go build -tags drill) pauses commits between their
// phases through the coordinators' internal phase hook, which is not public API.
const drillBuild = true

// phaseOption is the coordinator option that calls hook at each phase of a commit.
func phaseOption(hook phaseHook) coordinator.Option {
	return core.WithPhaseHook(func(ctx context.Context, gid string, p core.Phase) error {
		return hook(ctx, gid, string(p))
	})
}
