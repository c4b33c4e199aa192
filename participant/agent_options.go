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
	timeout time.Duration
	mode    Termination
	decider Decider
	poll    time.Duration
	log     *slog.Logger
	batch   int
	table   string
}

// Defaults of an [Agent].
const (
	DefaultAgentTimeout = 10 * time.Second
	DefaultAgentPoll    = 500 * time.Millisecond
	DefaultAgentBatch   = 100
	DefaultAgentTable   = "txkit_3pc_agent"
)

func defaultAgentOptions() agentOptions {
	return agentOptions{
		timeout: DefaultAgentTimeout,
		mode:    TerminationConsultLog,
		poll:    DefaultAgentPoll,
		log:     slog.New(slog.DiscardHandler),
		batch:   DefaultAgentBatch,
		table:   DefaultAgentTable,
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
	case TerminationConsultLog:
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
