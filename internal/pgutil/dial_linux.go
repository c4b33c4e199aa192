package pgutil

import (
	"syscall"
	"time"
)

// tcpUserTimeout is Linux's TCP_USER_TIMEOUT (include/uapi/linux/tcp.h), which package syscall
// does not name.
const tcpUserTimeout = 0x12

// userTimeout returns a net.Dialer's Control that sets TCP_USER_TIMEOUT to d on TCP sockets.
func userTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d.Milliseconds()))
		}); err != nil {
			return err
		}
		return serr
	}
}
