package core

import "errors"

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
