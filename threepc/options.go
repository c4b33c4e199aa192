package threepc

import (
	"fmt"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
)

// options are threepc's own settings; the shared ones are those of package coordinator.
type options struct {
	canCommitTimeout   time.Duration
	preCommitTimeout   time.Duration
	participantTimeout time.Duration
}

func defaultOptions() *options {
	return &options{canCommitTimeout: 5 * time.Second, preCommitTimeout: 10 * time.Second,
		participantTimeout: 20 * time.Second}
}

// own returns threepc's own option called name, which set sets.
func own(name string, set func(*options)) coordinator.Option {
	return core.OwnOption("threepc."+name, set)
}

// WithTimeouts sets the three timeouts of the protocol, for participants slower or faster than
// the defaults (5s, 10s, 20s); they are given together because each bounds the next:
//   - canCommit bounds phase one, CanCommit: a branch that has not voted by then counts as a
//     "no", and the transaction aborts with nothing executed anywhere;
//   - preCommit bounds phase two, PreCommit: a branch that has not acknowledged by then — its
//     work failed, it is slow, or the network lost its answer — makes the transaction abort;
//   - participant declares the timeout the participants' agents act on (agent.WithTimeout of
//     package threepc/agent): a pre-committed branch that hears neither DoCommit nor abort for
//     that long decides alone. The coordinator does not send it; it must be above canCommit and
//     preCommit together (an agent acting sooner would decide while the coordinator may still
//     be in phase two; in consult-log mode it would abort transactions that are merely slow)
//     and below the global timeout (the leader aborts an undecided transaction at its timeout,
//     and the agents should have settled it by then).
//
// New refuses others with an error wrapping [coordinator.ErrInvalidOption].
func WithTimeouts(canCommit, preCommit, participant time.Duration) coordinator.Option {
	return own("WithTimeouts", func(o *options) {
		o.canCommitTimeout, o.preCommitTimeout, o.participantTimeout = canCommit, preCommit, participant
	})
}

// phaseTwoConns is the size of the pool each registered database gets for the phase two of the
// recovery (see [Coordinator.RegisterDB]); the starter's own phase two runs on the connections
// its branches worked on, so this pool serves only the leader's work.
const phaseTwoConns = 2

// Validate is called by New once every option is applied.
func (o *options) Validate(cfg core.Config) error {
	switch {
	case o.canCommitTimeout <= 0:
		return fmt.Errorf("cancommit timeout %v: %w", o.canCommitTimeout, coordinator.ErrInvalidOption)
	case o.preCommitTimeout <= 0:
		return fmt.Errorf("precommit timeout %v: %w", o.preCommitTimeout, coordinator.ErrInvalidOption)
	case o.participantTimeout <= o.canCommitTimeout+o.preCommitTimeout:
		return fmt.Errorf("participant timeout %v not above the cancommit and precommit timeouts together (%v + %v): the agents would decide while the coordinator may still be in phase two: %w",
			o.participantTimeout, o.canCommitTimeout, o.preCommitTimeout, coordinator.ErrInvalidOption)
	case o.participantTimeout >= cfg.Timeout:
		return fmt.Errorf("participant timeout %v not below the global timeout %v: %w", o.participantTimeout, cfg.Timeout, coordinator.ErrInvalidOption)
	}
	return nil
}
