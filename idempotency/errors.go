package idempotency

import "errors"

// Sentinel errors. Callers match them with [errors.Is]; the errors returned wrap them with the
// scope, key or option involved.
var (
	// ErrInvalidOption: [New] was given an option it cannot use (a bad schema or table name, a
	// retention, schedule or batch size out of range).
	ErrInvalidOption = errors.New("idempotency: invalid option")
	// ErrInvalidKey: a scope or key is empty, longer than [MaxKeyLen] bytes, not valid UTF-8 or
	// contains a NUL byte.
	ErrInvalidKey = errors.New("idempotency: invalid key")
	// ErrNilTx: a nil DBTX was passed where a transaction (or pool) is needed.
	ErrNilTx = errors.New("idempotency: nil transaction")
	// ErrDuplicate: the key was already claimed. Only [Store.ClaimFirst] returns it; [Store.Claim]
	// reports a duplicate as first == false with a nil error.
	ErrDuplicate = errors.New("idempotency: duplicate key")
	// ErrFingerprintMismatch: [Store.Begin] found the key already used with a different fingerprint:
	// the same idempotency key was sent with a different request.
	ErrFingerprintMismatch = errors.New("idempotency: fingerprint mismatch")
	// ErrNotCompleted: [Store.Begin] found the key claimed but never completed — its claim was
	// committed without [Store.Complete], or the same transaction already began it.
	ErrNotCompleted = errors.New("idempotency: key claimed but not completed")
	// ErrNotClaimed: [Store.Complete] found no claimed, uncompleted key to complete.
	ErrNotClaimed = errors.New("idempotency: key not claimed")
)
