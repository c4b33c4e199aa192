//go:build !drill

package main

import "github.com/txkit/txkit/coordinator"

// drillBuild reports whether this binary can pause a commit between its phases (-pause-rate). The
// bank a user copies cannot: that pause exists so that the failover drills' SIGKILLs land between
// the phases, and their build of the bank (go build -tags drill) takes phase_drill.go instead.
const drillBuild = false

// phaseOption is the coordinator option that calls hook at each phase of a commit: none here.
func phaseOption(phaseHook) coordinator.Option { return nil }
