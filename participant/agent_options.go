package participant

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/txkit/txkit/internal/pgutil"
)

// AgentOption configures an [Agent]. Options are applied in order by [NewAgent], which validates
// the result.
type AgentOption func(*agentOptions)

type agentOptions struct {
	timeout  time.Duration
	mode     Termination
	decider  Decider
	fallback time.Duration // WithLogFallback; 0: never commit without the log
	poll     time.Duration
	log      *slog.Logger
	batch    int
	table    string
	now      func() time.Time // the clock the log's outage is measured by (tests set it)
}

// Defaults of an [Agent].
const (
	DefaultAgentTimeout = 10 * time.Second
	DefaultAgentPoll    = 500 * time.Millisecond
	DefaultAgentBatch   = 100
	DefaultAgentTable   = "txkit_3pc_agent"
)

// MinLogFallback is the shortest outage of the decision log after which [WithLogFallback] may let
// an agent commit without it: longer than a PostgreSQL failover, so that one never makes an agent
// decide alone.
const MinLogFallback = 5 * time.Minute

func defaultAgentOptions() agentOptions {
	return agentOptions{
		timeout: DefaultAgentTimeout,
		mode:    TerminationConsultLog,
		poll:    DefaultAgentPoll,
		log:     slog.New(slog.DiscardHandler),
		batch:   DefaultAgentBatch,
		table:   DefaultAgentTable,
		now:     time.Now,
	}
}

// WithAgentTimeout sets how long a pre-committed branch waits for the coordinator's DoCommit or
// abort before the agent acts alone (default [DefaultAgentTimeout], 10 s), measured on the
// database's clock from the end of the PreCommit's work. Set it to the 3PC coordinator's
// participant timeout: longer than its CanCommit and PreCommit timeouts, shorter than its global
// timeout.
func WithAgentTimeout(d time.Duration) AgentOption { return func(o *agentOptions) { o.timeout = d } }

// WithTermination sets how a timed-out branch ends (default [TerminationConsultLog], which needs
// [WithDecider]).
func WithTermination(m Termination) AgentOption { return func(o *agentOptions) { o.mode = m } }

// WithLogFallback lets a [TerminationConsultLog] agent commit a timed-out branch by the textbook
// rule once the decision log has been unreachable for after (at least [MinLogFallback]; default:
// never, the branch waits for the log). Such a commit may contradict the coordinator's abort: it
// trades the protocol's anomaly for not holding a branch through a long outage of the log. A
// shorter after, or the option with [TerminationTextbook], makes [NewAgent] return an error
// wrapping [ErrInvalidOption].
func WithLogFallback(after time.Duration) AgentOption {
	return func(o *agentOptions) { o.fallback = after }
}

// WithDecider sets the coordinator's decision log, which [TerminationConsultLog] consults
// (threepc.Coordinator is one). It is not used in [TerminationTextbook] mode.
func WithDecider(d Decider) AgentOption { return func(o *agentOptions) { o.decider = d } }

// WithAgentPoll sets how often [Agent.Run] looks for timed-out branches (default
// [DefaultAgentPoll], 500 ms).
func WithAgentPoll(d time.Duration) AgentOption { return func(o *agentOptions) { o.poll = d } }

// WithAgentLogger sets the logger (default: discard). The agent logs what it decides alone (info),
// a decision log it could not reach (warning) and heuristic conflicts (error), with the keys gid
// and branch.
func WithAgentLogger(l *slog.Logger) AgentOption {
	return func(o *agentOptions) {
		if l != nil {
			o.log = l
		}
	}
}

// WithAgentBatch sets how many timed-out branches one statement claims (default
// [DefaultAgentBatch]).
func WithAgentBatch(n int) AgentOption { return func(o *agentOptions) { o.batch = n } }

// WithAgentTable sets the name of the agent's table (default [DefaultAgentTable],
// "txkit_3pc_agent"), used exactly as given, in the barrier's schema ([WithBarrierSchema]). Agents
// that share a table share its branches: each timed-out branch is decided by one of them.
func WithAgentTable(name string) AgentOption { return func(o *agentOptions) { o.table = name } }

func (o agentOptions) validate() error {
	if o.timeout < time.Microsecond {
		return fmt.Errorf("participant: agent timeout %v must be at least 1µs: %w", o.timeout, ErrInvalidOption)
	}
	if o.poll <= 0 {
		return fmt.Errorf("participant: agent poll interval %v must be positive: %w", o.poll, ErrInvalidOption)
	}
	if o.batch < 1 {
		return fmt.Errorf("participant: agent batch %d is below 1: %w", o.batch, ErrInvalidOption)
	}
	switch o.mode {
	case TerminationTextbook:
		if o.fallback != 0 {
			return fmt.Errorf("participant: agent: WithLogFallback applies to termination mode %s only, not %s: %w", TerminationConsultLog, o.mode, ErrInvalidOption)
		}
	case TerminationConsultLog:
		if o.fallback != 0 && o.fallback < MinLogFallback {
			return fmt.Errorf("participant: agent: log fallback after %v: below the minimum outage of %v (MinLogFallback), which a PostgreSQL failover could reach and make the agent commit alone: %w",
				o.fallback, MinLogFallback, ErrInvalidOption)
		}
		if pgutil.IsNil(o.decider) {
			return fmt.Errorf("participant: agent: termination mode %s needs a decision log (WithDecider): %w", o.mode, ErrInvalidOption)
		}
	default:
		return fmt.Errorf("participant: agent: unknown termination mode %s: %w", o.mode, ErrInvalidOption)
	}
	// The due index is named after the table: "<table>_due" must fit PostgreSQL's 63 bytes too.
	if err := pgutil.CheckText(o.table, 63-len(agentIndexSuffix)); err != nil {
		return fmt.Errorf("participant: agent table %q: %v: %w", o.table, err, ErrInvalidOption)
	}
	return nil
}
