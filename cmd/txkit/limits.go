package main

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// serveLimits bound what `txkit serve` takes on, so that one client cannot hold all of it.
type serveLimits struct {
	timeout  time.Duration // a request not answered by then is answered 503 (-request-timeout)
	requests int           // requests served at once; more are answered 503 (-max-requests)
	conns    int           // open connections; more are closed at once (-max-conns)
}

func (l serveLimits) check() error {
	switch {
	case l.timeout <= 0:
		return usageErr("serve: -request-timeout %v: must be positive", l.timeout)
	case l.requests < 1:
		return usageErr("serve: -max-requests %d: must be at least 1", l.requests)
	case l.conns < 1:
		return usageErr("serve: -max-conns %d: must be at least 1", l.conns)
	}
	return nil
}

// limitHandler serves h at most l.requests at a time — one more is answered 503 with Retry-After
// at once, not queued — and answers 503 to a request h has not answered within l.timeout, whose
// context it cancels (the queries under it stop).
func limitHandler(h http.Handler, l serveLimits) http.Handler {
	busy := []byte(`{"error":"busy: ` + strconv.Itoa(l.requests) + ` requests in flight; retry"}` + "\n")
	timedOut := http.TimeoutHandler(h, l.timeout, `{"error":"request not answered within `+l.timeout.String()+`"}`+"\n")
	slots := make(chan struct{}, l.requests)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(busy)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/api/") {
			// The timeout's answer is written with the headers set here; the API's own answers
			// set their Content-Type themselves.
			w.Header().Set("Content-Type", "application/json")
		}
		timedOut.ServeHTTP(w, r)
	})
}

// limitListener returns ln, holding at most n connections open: one accepted past that is closed
// at once, so that held connections cannot queue others unseen behind them.
func limitListener(ln net.Listener, n int) net.Listener {
	return &connLimit{Listener: ln, slots: make(chan struct{}, n)}
}

type connLimit struct {
	net.Listener
	slots chan struct{}
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			_ = c.Close()
		}
	}
}

// limitedConn gives its slot back when closed (once, however often Close is called).
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
