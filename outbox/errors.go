package outbox

import "errors"

// Sentinel errors. Callers match them with [errors.Is]; the errors returned wrap them with the
// table, message id, topic or option involved, and keep PostgreSQL's error in the chain.
var (
	// ErrInvalidOption: [New] or [NewRelay] was given an option or argument it cannot use (a bad
	// schema, table or channel name, a batch size, schedule, backoff or attempt limit out of range,
	// a nil pool, outbox, publisher or elector), or [Relay.Run] was called on a relay built without
	// [WithElector].
	ErrInvalidOption = errors.New("outbox: invalid option")
	// ErrInvalidMessage: [Outbox.Enqueue] refused a message: empty topic, a field over its limit
	// (then the error wraps [ErrTooLarge] too), text that PostgreSQL cannot store (invalid UTF-8,
	// NUL bytes). A [Publisher] returns an error wrapping it for a message its broker can never
	// carry; the [Relay] then makes the message dead at once instead of retrying it.
	ErrInvalidMessage = errors.New("outbox: invalid message")
	// ErrTooLarge: [Outbox.Enqueue] refused a message with a field over its limit: the topic
	// ([MaxTopicLen]), the key ([MaxKeyLen]), a header name or value ([MaxHeaderNameLen],
	// [MaxHeaderValueLen]), the number or total size of the headers ([MaxHeaders],
	// [MaxHeadersSize]) or the body ([MaxBodySize]). The error names the field, its size and
	// the limit, and wraps [ErrInvalidMessage] as well.
	ErrTooLarge = errors.New("outbox: message too large")
	// ErrDuplicate: [Outbox.Enqueue] was given a message whose ID is already in the outbox. The
	// caller's transaction is aborted then (PostgreSQL rolls back on a unique violation). In
	// [Outbox.Do]'s transaction Do returns it (or the statement the insert went out with).
	ErrDuplicate = errors.New("outbox: duplicate message id")
	// ErrNilTx: a nil DBTX was passed where a transaction (or pool) is needed.
	ErrNilTx = errors.New("outbox: nil transaction")
	// ErrRunning: [Relay.Run] was called while another call of Run on the same Relay was running.
	ErrRunning = errors.New("outbox: relay already running")
)
