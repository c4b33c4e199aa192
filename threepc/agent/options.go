package agent

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
)

// Option configures an [Agent] or a [PG]: both take the same options, applied in order by [New]
// and [NewPG], which validate the result.
type Option func(*options)

type options struct {
	timeout  time.Duration
	mode     Termination
	fallback time.Duration // WithTermination's; 0: never commit without the log
	poll     time.Duration
	log      *slog.Logger
	table    string           // an Agent's
	tableSet bool             // WithTable was given (a PG refuses it)
	batch    int              // branches one claim takes (an Agent's); tests set it (export_test.go)
	now      func() time.Time // the clock the log's outage is measured by; tests set it (export_test.go)
}

// Defaults of the options.
const (
	DefaultTimeout   = 10 * time.Second       // an Agent's; a PG's is DefaultPGTimeout
	DefaultPGTimeout = 20 * time.Second       // threepc's default participant timeout
	DefaultPoll      = 500 * time.Millisecond // both kinds'
	DefaultTable     = "txkit_3pc_agent"      // an Agent's
	defaultBatch     = 100
)

// MinLogFallback is the shortest outage of the decision log after which [WithTermination] may let
// an agent commit without it: longer than a PostgreSQL failover, so that one never makes an agent
// decide alone.
const MinLogFallback = 5 * time.Minute

// defaultOptions returns the defaults of an agent whose kind's default timeout is timeout.
func defaultOptions(timeout time.Duration) options {
	return options{timeout: timeout, mode: TerminationConsultLog, poll: DefaultPoll, log: slog.New(slog.DiscardHandler), batch: defaultBatch, now: time.Now}
}

// WithTimeout sets how long a pre-committed branch waits for the coordinator's DoCommit or abort
// before the agent ends it alone (default [DefaultTimeout] for an Agent, [DefaultPGTimeout] for a
// PG), measured on the database's clock from the end of the PreCommit's work, and how often Run
// looks for timed-out branches (default [DefaultPoll]; 0 keeps it), so a branch ends between
// timeout and timeout + poll. Give timeout the value of the participant timeout of the
// coordinator's threepc.WithTimeouts.
func WithTimeout(timeout, poll time.Duration) Option {
	return func(o *options) {
		o.timeout = timeout
		if poll != 0 {
			o.poll = poll
		}
	}
}

// WithTermination sets how a timed-out branch ends (default [TerminationConsultLog], no
// fallback). A fallback other than 0 lets a [TerminationConsultLog] agent commit a timed-out
// branch by the textbook rule once the decision log has been unreachable for fallback (at least
// [MinLogFallback]; 0: never, the branch waits for the log). Such a commit may contradict the
// coordinator's abort: it trades the protocol's anomaly for not holding a branch through a long
// outage of the log. A shorter fallback, or one with [TerminationTextbook], is an error wrapping
// [ErrInvalidOption].
func WithTermination(m Termination, fallback time.Duration) Option {
	return func(o *options) { o.mode, o.fallback = m, fallback }
}

// WithLogger sets the logger (default: discard). An agent logs what it decides alone (info), a
// decision log it could not reach (warning) and heuristic conflicts (error), with the keys gid and
// branch.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = obs.Logger(l)
		}
	}
}

// validate checks the options of an agent that has a decision log (hasDecider) or not.
func (o *options) validate(hasDecider bool) error {
	switch {
	case o.timeout < time.Microsecond:
		return fmt.Errorf("agent: timeout %v must be at least 1µs: %w", o.timeout, ErrInvalidOption)
	case o.poll <= 0:
		return fmt.Errorf("agent: poll interval %v must be positive: %w", o.poll, ErrInvalidOption)
	case o.batch < 1:
		return fmt.Errorf("agent: batch %d is below 1: %w", o.batch, ErrInvalidOption)
	}
	switch o.mode {
	case TerminationTextbook:
		if o.fallback != 0 {
			return fmt.Errorf("agent: a log fallback applies to termination mode %s only, not %s: %w", TerminationConsultLog, o.mode, ErrInvalidOption)
		}
	case TerminationConsultLog:
		if o.fallback != 0 && o.fallback < MinLogFallback {
			return fmt.Errorf("agent: log fallback after %v: below the minimum outage of %v (MinLogFallback), which a PostgreSQL failover could reach and make the agent commit alone: %w",
				o.fallback, MinLogFallback, ErrInvalidOption)
		}
		if !hasDecider {
			return fmt.Errorf("agent: termination mode %s needs a decision log (a Decider): %w", o.mode, ErrInvalidOption)
		}
	default:
		return fmt.Errorf("agent: unknown termination mode %s: %w", o.mode, ErrInvalidOption)
	}
	return nil
}

// validateTable checks an Agent's table: its due index, "<table>_due", must fit PostgreSQL's 63
// bytes too.
func (o *options) validateTable() error {
	if !o.tableSet {
		o.table = DefaultTable
	}
	if err := pgutil.CheckText(o.table, 63-len(indexSuffix)); err != nil {
		return fmt.Errorf("agent: agent table %q: %v: %w", o.table, err, ErrInvalidOption)
	}
	return nil
}
