package admin

import "errors"

// Sentinel errors. Callers match them with [errors.Is]; the errors returned wrap them with the gid,
// message or notification id involved. [Admin.Handler] answers them with 404, 409, 400 and 401.
var (
	// ErrNotFound: no transaction has the gid, no outbox message or notification has the id.
	ErrNotFound = errors.New("admin: not found")
	// ErrConflict: the thing asked for cannot be done in the state the row is in (requeue of a
	// message that is not dead, redeliver of a notification that has not failed), or an
	// Idempotency-Key was used again for another request, or while its first request still runs.
	ErrConflict = errors.New("admin: conflict")
	// ErrBadRequest: a filter or argument is out of range or unknown (a kind, a status, a limit).
	// The error's text says which and why, in words an operator can act on.
	ErrBadRequest = errors.New("admin: bad request")
	// ErrUnauthorized: a request carried no credentials, or ones that do not verify, or ones
	// that may only read for a call that acts or reveals, or the Admin has none that may act
	// configured (read-only).
	ErrUnauthorized = errors.New("admin: unauthorized")
	// ErrInvalidOption: [New] was given an option it cannot use (a bad schema or table name, an
	// empty token, a short HMAC secret, two logs with one name).
	ErrInvalidOption = errors.New("admin: invalid option")
)
