package rocketmq

import "errors"

// Sentinel errors. Callers match them with [errors.Is]; the handler's errors wrap them together
// with obrocketmq.ErrPoison.
var (
	// ErrInvalidOption: [NewHandler] was given an argument or option it cannot use, or not told
	// which receivers messages may name.
	ErrInvalidOption = errors.New("notify/rocketmq: invalid option")
	// ErrNotAllowed: a message names a receiver the intake does not allow.
	ErrNotAllowed = errors.New("notify/rocketmq: receiver not allowed")
	// ErrUnauthorized: a message lacks its producer's valid signature.
	ErrUnauthorized = errors.New("notify/rocketmq: unauthorized")
)
