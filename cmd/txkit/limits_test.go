package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

// limitedServer serves h on loopback the way `txkit serve` does (limitListener, limitHandler),
// and returns its base URL and address.
func limitedServer(t *testing.T, h http.Handler, lim serveLimits) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: limitHandler(h, lim), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(limitListener(ln, lim.conns)) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return "http://" + ln.Addr().String(), ln.Addr().String()
}

// get sends GET url with a client of its own (no shared idle connections; 15 s to answer) and
// returns the status, a header and the body.
func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

var roomy = serveLimits{timeout: time.Minute, requests: 64, conns: 64}

// A request not answered within -request-timeout is answered 503 (JSON under /api/), and the
// handler's context is cancelled, so the queries under it stop.
func TestServeRequestTimeout(t *testing.T) {
	cancelled := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		close(cancelled)
	})
	lim := roomy
	lim.timeout = 200 * time.Millisecond
	base, _ := limitedServer(t, h, lim)
	start := time.Now()
	code, hd, body := get(t, base+"/api/overview")
	if code != http.StatusServiceUnavailable || hd.Get("Content-Type") != "application/json" ||
		!strings.Contains(body, `"error":"request not answered within 200ms"`) {
		t.Fatalf("a request past the timeout: %d %q %s", code, hd.Get("Content-Type"), body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("answered after %v", d)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context is not cancelled at the timeout")
	}
}

// Past -max-requests in flight, a request is answered 503 with Retry-After at once; when one
// finishes, requests are served again.
func TestServeMaxRequests(t *testing.T) {
	entered, release := make(chan struct{}, 8), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	})
	lim := roomy
	lim.requests = 2
	base, _ := limitedServer(t, h, lim)
	results := make(chan int, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/slow", nil)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				results <- 0
				return
			}
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatal("the two slow requests are not both being served")
		}
	}
	code, hd, body := get(t, base+"/api/overview")
	if code != http.StatusServiceUnavailable || hd.Get("Retry-After") == "" || !strings.Contains(body, "busy: 2 requests in flight") {
		t.Fatalf("a third request in flight: %d %v %s", code, hd, body)
	}
	close(release)
	for range 2 {
		if c := <-results; c != http.StatusOK {
			t.Fatalf("a slow request answered %d", c)
		}
	}
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		code, _, _ := get(t, base+"/fast")
		return code == http.StatusOK
	}, "requests are not served again once the slow ones are done")
}

// Past -max-conns open connections, one more is closed at once; when a held one closes, new
// connections are served again.
func TestServeMaxConns(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	lim := roomy
	lim.conns = 3
	base, addr := limitedServer(t, h, lim)
	// Hold lim.conns connections, each answered once (so the server has accepted it), kept open.
	ask := func(c net.Conn) error {
		if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: t\r\n\r\n"); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	var held []net.Conn
	for i := range lim.conns {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if err := ask(c); err != nil {
			t.Fatalf("held connection %d: %v", i, err)
		}
		held = append(held, c)
	}
	extra, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := ask(extra); err == nil {
		t.Fatalf("connection %d of at most %d was served", lim.conns+1, lim.conns)
	}
	_ = held[0].Close()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/x", nil)
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "a new connection is not served after a held one closed")
}
