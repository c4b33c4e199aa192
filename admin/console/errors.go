package console

import "errors"

// ErrInvalidOption is wrapped by the error [Handler] returns when an option is unusable.
var ErrInvalidOption = errors.New("console: invalid option")
