package threepc

import (
	"fmt"
	"math"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
)

// options are threepc's own settings; the shared ones are those of package coordinator.
type options struct {
	canCommitTimeout   time.Duration
	preCommitTimeout   time.Duration
	participantTimeout time.Duration
	phaseTwoConns      int
}

func defaultOptions() *options {
	return &options{canCommitTimeout: 5 * time.Second, preCommitTimeout: 10 * time.Second,
		participantTimeout: 20 * time.Second, phaseTwoConns: 2}
}

// own returns threepc's own option called name, which set sets.
func own(name string, set func(*options)) coordinator.Option {
	return core.OwnOption("threepc."+name, set)
}

// WithCanCommitTimeout bounds phase one, CanCommit (default 5s): a branch that has not voted by
// then counts as a "no", and the transaction aborts with nothing executed anywhere.
func WithCanCommitTimeout(d time.Duration) coordinator.Option {
	return own("WithCanCommitTimeout", func(o *options) { o.canCommitTimeout = d })
}

// WithPreCommitTimeout bounds phase two, PreCommit (default 10s): a branch that has not
// acknowledged by then — its work failed, it is slow, or the network lost its answer — makes the
// transaction abort.
func WithPreCommitTimeout(d time.Duration) coordinator.Option {
	return own("WithPreCommitTimeout", func(o *options) { o.preCommitTimeout = d })
}

// WithParticipantTimeout declares the timeout the participants' agents act on (default 20s;
// agent.WithTimeout of package threepc/agent): a pre-committed branch that hears neither
// DoCommit nor abort for that long decides alone. The coordinator does not send it; it checks it
// against its own: it must be above the CanCommit and PreCommit timeouts together (an agent acting
// sooner would decide while the coordinator may still be in phase two; in consult-log mode it
// would abort transactions that are merely slow) and below the global timeout (the leader aborts
// an undecided transaction at its timeout, and the agents should have settled it by then).
func WithParticipantTimeout(d time.Duration) coordinator.Option {
	return own("WithParticipantTimeout", func(o *options) { o.participantTimeout = d })
}

// WithPhaseTwoConns sets the size of the pool each registered database gets for the phase two of
// the recovery (default 2; see [Coordinator.RegisterDB]). Below 1 is an error wrapping
// [coordinator.ErrInvalidOption].
func WithPhaseTwoConns(n int) coordinator.Option {
	return own("WithPhaseTwoConns", func(o *options) { o.phaseTwoConns = n })
}

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
	case o.phaseTwoConns < 1 || o.phaseTwoConns > math.MaxInt32:
		return fmt.Errorf("phase-two connections %d: %w", o.phaseTwoConns, coordinator.ErrInvalidOption)
	}
	return nil
}
