package pgutil

import (
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The TCP settings of the connections txkit's own pools make ([SetTCPTimeouts]).
const (
	// KeepAliveIdle, KeepAliveInterval and KeepAliveCount: an idle connection whose peer is gone
	// (a partition, a server host lost) is found dead after about 15 + 3×5 s.
	KeepAliveIdle     = 15 * time.Second
	KeepAliveInterval = 5 * time.Second
	KeepAliveCount    = 3
	// UserTimeout (TCP_USER_TIMEOUT, Linux): a connection whose sent data has gone unacknowledged
	// this long is closed — a query sent into a partition fails after it instead of TCP's
	// retransmissions' ~15 minutes. A query that runs long is unaffected: its request was
	// acknowledged.
	UserTimeout = 30 * time.Second
)

// SetTCPTimeouts makes cfg's connections dial with TCP keepalive and, on Linux, a TCP user timeout
// (the constants above), keeping cfg's connect timeout. It replaces cfg.DialFunc.
func SetTCPTimeouts(cfg *pgconn.Config) {
	d := &net.Dialer{
		Timeout: cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: KeepAliveIdle, Interval: KeepAliveInterval,
			Count: KeepAliveCount},
		Control: userTimeout(UserTimeout),
	}
	cfg.DialFunc = d.DialContext
}
