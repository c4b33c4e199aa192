package participant

import "errors"

// ErrInvalidOption: [NewSigningClient] was given a secret it cannot use. [ErrRefused] and
// [ErrBadRequest], the answers of the wire protocol, are declared in wire.go. Callers match them
// with [errors.Is].
var ErrInvalidOption = errors.New("participant: invalid option")
