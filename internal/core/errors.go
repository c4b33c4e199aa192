package core

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers match them with [errors.Is]; the errors returned wrap them with the gid
// and branch involved. A deposed leader's write fails with an error wrapping [lock.ErrFenced].
var (
	// ErrNotFound: no global transaction has the gid.
	ErrNotFound = errors.New("core: transaction not found")
	// ErrInvalidState: the transaction is not in a status that allows the change (see state.go).
	ErrInvalidState = errors.New("core: invalid state")
	// ErrInvalidBranch: a branch is malformed (empty name, unknown target) or already registered.
	ErrInvalidBranch = errors.New("core: invalid branch")
	// ErrInvalidOption: a constructor was given an option or argument it cannot use.
	ErrInvalidOption = errors.New("core: invalid option")
	// ErrRunning: Run was called while another Run of the same Recoverer is running.
	ErrRunning = errors.New("core: already running")
)

// Sentinels are a coordinator package's own sentinels for the core's, in the order of the
// fields: [Sentinels.Map] puts them in front of the core's.
type Sentinels struct {
	NotFound, InvalidState, InvalidBranch, InvalidOption, Running error
}

// Map returns err with the package's sentinel for the core sentinel it wraps in front, keeping
// both in the chain; an error that wraps none is returned as it is.
func (s Sentinels) Map(err error) error {
	for _, m := range []struct{ from, to error }{
		{ErrNotFound, s.NotFound}, {ErrInvalidState, s.InvalidState}, {ErrInvalidBranch, s.InvalidBranch},
		{ErrInvalidOption, s.InvalidOption}, {ErrRunning, s.Running},
	} {
		if m.to != nil && errors.Is(err, m.from) {
			return fmt.Errorf("%w: %w", m.to, err)
		}
	}
	return err
}

// PanicError is what a recovered panic becomes: a participant's Do called by [Base.Call], or a
// [Driver], panicked. It is recorded and retried with backoff like any failure: its text
// ("panic: <value>") is the branch's or transaction's last_error; the stack is logged, not kept.
// It does not unwrap to the panic's value, even an error: a panic is an unknown outcome, never a
// refusal.
type PanicError struct {
	Value any // what was passed to panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }
