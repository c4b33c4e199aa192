package core

import "context"

// Phase is a point of a two- or three-phase Commit where a [PhaseHook] is called.
type Phase string

// The points a hook sees: twopc's PhasePrepared and PhaseDecided, threepc's PhaseCanCommitted,
// PhasePreCommitted and PhaseDecided.
const (
	PhasePrepared     Phase = "prepared"     // 2PC: every branch voted yes; the decision is not yet written (vote markers: the votes are it)
	PhaseCanCommitted Phase = "cancommitted" // 3PC: every branch voted yes; nothing recorded or executed yet
	PhasePreCommitted Phase = "precommitted" // 3PC: every branch pre-committed; the decision is not yet written
	PhaseDecided      Phase = "decided"      // the decision is written; phase two not begun
)

// PhaseHook is called by twopc's and threepc's Global.Commit at each [Phase] with the
// transaction's gid. It exists for failure drills and tests: a hook that blocks (or kills the
// process) there shows what the agents and the recovery do with a coordinator that died between
// the phases. An error it returns aborts the transaction at the phases before the decision and is
// returned; at PhaseDecided it is ignored.
type PhaseHook func(ctx context.Context, gid string, p Phase) error

// WithPhaseHook sets the hook of a twopc or threepc coordinator (default none). It is an option of
// package coordinator's type that only this module's tests and drills can name.
func WithPhaseHook(h PhaseHook) Option { return func(c *Config) { c.PhaseHook = h } }
