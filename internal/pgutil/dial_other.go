//go:build !linux

package pgutil

import (
	"syscall"
	"time"
)

// userTimeout returns nil: TCP_USER_TIMEOUT is Linux's; elsewhere keepalive alone applies.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error { return nil }
