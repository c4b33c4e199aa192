package rocketmq

import "errors"

// Sentinel errors. Callers match them with [errors.Is]; the errors returned wrap them with the
// message id, topic, group or option involved, and keep the client's or PostgreSQL's error in the
// chain. A message the package refuses to encode wraps [outbox.ErrInvalidMessage] instead.
var (
	// ErrInvalidOption: a constructor was given an argument or option it cannot use (an empty name
	// server list, a bad group, topic or table name, a duration or count out of range, a nil pool,
	// store or handler, or an option meant for another type).
	ErrInvalidOption = errors.New("rocketmq: invalid option")
	// ErrClosed: the Publisher or TxProducer was closed.
	ErrClosed = errors.New("rocketmq: closed")
	// ErrRunning: [Consumer.Run] was called while another call of Run on the same Consumer was
	// running.
	ErrRunning = errors.New("rocketmq: consumer already running")
	// ErrSendStatus: the broker stored the message but answered with a status other than SEND_OK
	// (flush or slave timeout, slave not available). The message may be delivered; publishing it
	// again is safe because consumers deduplicate by id.
	ErrSendStatus = errors.New("rocketmq: broker did not answer SEND_OK")
	// ErrPoison: a message that can never be applied. The [Consumer] acknowledges it without
	// applying it, logs it and counts it in [Stats].Poison; it is not redelivered. The Consumer
	// reports undecodable messages this way, and a handler returns an error wrapping ErrPoison for
	// a message it refuses for good (a body that does not parse, for instance).
	ErrPoison = errors.New("rocketmq: poison message")
	// ErrDuplicateTx: [TxProducer.Send] was given a message whose ID has been used by an earlier
	// Send — one in progress, one that committed, or one the broker's check-back has already rolled
	// back. Nothing was committed and the half message was rolled back.
	ErrDuplicateTx = errors.New("rocketmq: transaction id already used")
	// ErrOutcomeUnknown: [TxProducer.Send] could not learn whether the local transaction committed
	// (the connection broke during COMMIT). The broker will ask through a check-back and deliver
	// the message if and only if it did.
	ErrOutcomeUnknown = errors.New("rocketmq: local transaction outcome unknown")
)
