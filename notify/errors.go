package notify

import "errors"

// Sentinel errors. Callers match them with [errors.Is]; the errors returned wrap them with the
// notification id, receiver or key involved.
var (
	// ErrInvalidOption: a constructor or call was given an option or argument it cannot use.
	ErrInvalidOption = errors.New("notify: invalid option")
	// ErrInvalidNotification: a notification is malformed (unknown receiver, empty or over-long
	// key, a payload that is not JSON).
	ErrInvalidNotification = errors.New("notify: invalid notification")
	// ErrTooLarge: a notification's payload, key or receiver name is longer than its limit
	// ([MaxPayloadLen], [MaxKeyLen], [MaxReceiverLen]). Errors wrapping it also wrap
	// [ErrInvalidNotification].
	ErrTooLarge = errors.New("notify: too large")
	// ErrNotFound: no notification has the id (or the receiver and key).
	ErrNotFound = errors.New("notify: notification not found")
	// ErrUnauthorized: a request's or an answer's signature or timestamp does not verify, a
	// request was seen before (a replay), or a delivery or an answer is not the one asked for
	// (another receiver's, another key's). Receivers answer it with 401.
	ErrUnauthorized = errors.New("notify: unauthorized")
	// ErrNilTx: a nil transaction or connection was passed.
	ErrNilTx = errors.New("notify: nil transaction")
	// ErrRunning: Run was called while another Run of the same Notifier is running.
	ErrRunning = errors.New("notify: already running")
)

// errTaken is the error of an insert Do deferred whose receiver and key (or id) were taken: Do
// runs fn again with the inserts sent at once, and that Enqueue answers as it always did.
var errTaken = errors.New("notify: the notification's receiver and key are taken: Do runs its function again")
