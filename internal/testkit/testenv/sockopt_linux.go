package testenv

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// TCPSettings are the keepalive and user timeout settings of a TCP connection, read from its socket.
type TCPSettings struct {
	KeepAlive     bool
	KeepAliveIdle time.Duration
	UserTimeout   time.Duration // 0: the kernel's default (retransmissions decide)
}

// TCPSettingsOf reads c's socket options; c must be a *net.TCPConn.
func TCPSettingsOf(t testing.TB, c net.Conn) TCPSettings {
	t.Helper()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("%T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var s TCPSettings
	var keep, idle, user int
	var oerr error
	if err := raw.Control(func(fd uintptr) {
		get := func(level, opt int, v *int) {
			if oerr == nil {
				*v, oerr = syscall.GetsockoptInt(int(fd), level, opt)
			}
		}
		get(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, &keep)
		get(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, &idle)
		get(syscall.IPPROTO_TCP, 0x12, &user) // TCP_USER_TIMEOUT
	}); err != nil {
		t.Fatal(err)
	}
	if oerr != nil {
		t.Fatal(oerr)
	}
	s.KeepAlive, s.KeepAliveIdle, s.UserTimeout = keep != 0, time.Duration(idle)*time.Second, time.Duration(user)*time.Millisecond
	return s
}
