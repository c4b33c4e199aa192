package twopc

import (
	"fmt"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
)

// options are twopc's own settings; the shared ones are those of package coordinator.
type options struct {
	prepareTimeout time.Duration
	resolveSpec    string
	resolveGrace   time.Duration
	votes          bool
	voteScan       int // vote rows one query of the sweep reads (voteScan; tests lower it)
}

func defaultOptions() *options {
	return &options{prepareTimeout: 10 * time.Second, resolveSpec: "@every 5s", resolveGrace: 15 * time.Second, votes: true, voteScan: voteScan}
}

// own returns twopc's own option called name, which set sets.
func own(name string, set func(*options)) coordinator.Option {
	return core.OwnOption("twopc."+name, set)
}

// WithPrepareTimeout bounds phase one (default 10s): a participant that has not voted by then
// counts as a "no", and the transaction aborts. It must be shorter than the global timeout.
func WithPrepareTimeout(d time.Duration) coordinator.Option {
	return own("WithPrepareTimeout", func(o *options) { o.prepareTimeout = d })
}

// WithInDoubtResolution sets the cron spec of the leader's scan of pg_prepared_xacts in every
// registered database (default "@every 5s") and the grace a prepared transaction is left alone
// after it was prepared (default 15s). A prepared transaction the log does not know is rolled
// back once the grace has passed, so keep the grace above [WithPrepareTimeout]: a shorter one
// only aborts transactions whose phase one is slow (it never commits half of one).
func WithInDoubtResolution(spec string, grace time.Duration) coordinator.Option {
	return own("WithInDoubtResolution", func(o *options) { o.resolveSpec, o.resolveGrace = spec, grace })
}

// phaseTwoConns is the size of the pool each registered database gets for the phase two of the
// recovery and for the in-doubt resolver (see [Coordinator.RegisterDB]). The starter's own phase
// two runs on the connections its branches prepared on, so this pool serves only the leader's
// work and operators' [Coordinator.ResolveInDoubt]: 2 is enough (TestIntegrationHotRowSmallPool).
const phaseTwoConns = 2

// WithVoteMarkers(true), the default, makes [Global.Commit] of a transaction whose branches are
// all databases take two rounds of PostgreSQL flushes instead of three: the transaction is recorded
// voting while its branches prepare, each branch's transaction inserts its vote row (committed with
// it) just before PREPARE TRANSACTION, and once every branch voted yes Commit commits them. The
// votes are the decision: a leader that finds the transaction still voting settles it from each
// branch's database (docs/coordinators.md, "Vote markers", has the protocol and its costs).
//
// Each registered database gets a table "<schema>.<prefix>vote", created by the first
// [Global.Enlist] of that database; a role that may not create it makes Enlist fail at once with
// an error wrapping [coordinator.ErrInvalidOption]. Create it once with a role that may, or pass
// false: Commit then writes its decision between the phases (presumed abort), one round of
// flushes more, and nothing is created in the registered databases. Transactions with a
// participant branch are unchanged. Every coordinator recovers voting transactions, whatever
// this option.
func WithVoteMarkers(on bool) coordinator.Option {
	return own("WithVoteMarkers", func(o *options) { o.votes = on })
}

// Validate is called by New once every option is applied.
func (o *options) Validate(cfg core.Config) error {
	switch {
	case o.prepareTimeout <= 0:
		return fmt.Errorf("prepare timeout %v: %w", o.prepareTimeout, coordinator.ErrInvalidOption)
	case o.prepareTimeout >= cfg.Timeout:
		return fmt.Errorf("prepare timeout %v not below the global timeout %v: %w", o.prepareTimeout, cfg.Timeout, coordinator.ErrInvalidOption)
	case o.resolveGrace < 0:
		return fmt.Errorf("in-doubt grace %v: %w", o.resolveGrace, coordinator.ErrInvalidOption)
	}
	return nil
}
