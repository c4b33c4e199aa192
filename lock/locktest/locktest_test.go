package locktest

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

func TestMain(m *testing.M) {
	testenv.VerifyNoLeaks(m)
}

func TestHistory(t *testing.T) {
	type step struct {
		enter bool
		seq   int64
	}
	in, out := func(seq int64) step { return step{true, seq} }, step{}
	for _, tc := range []struct {
		name  string
		steps []step
		holds int
		errs  int
	}{
		{"empty", nil, 0, 0},
		{"one at a time, rising", []step{in(1), out, in(2), out, in(7), out}, 3, 0},
		{"overlap", []step{in(1), in(2), out, out}, 2, 1},
		{"same token twice", []step{in(3), out, in(3), out}, 2, 1},
		{"token goes back", []step{in(3), out, in(2), out}, 2, 1},
		{"zero token", []step{in(0), out}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h History
			for _, s := range tc.steps {
				if s.enter {
					h.Enter(lock.Token{Seq: s.seq})
				} else {
					h.Exit()
				}
			}
			if h.Holds() != tc.holds {
				t.Errorf("Holds() = %d, want %d", h.Holds(), tc.holds)
			}
			var n int
			if err := h.Err(); err != nil {
				n = len(err.(interface{ Unwrap() []error }).Unwrap())
			}
			if n != tc.errs {
				t.Errorf("Err() = %v: %d errors, want %d", h.Err(), n, tc.errs)
			}
		})
	}
}

// TestPartition: before the cut a partitioned connection carries bytes both ways; after it,
// writes vanish, reads wait for their deadline, and new dials fail.
func TestPartition(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() { // an echo server
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		served <- err
	}()
	p := newPartition()
	c, err := p.dial(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo before the cut: %q, %v", buf, err)
	}
	p.start()
	if n, err := c.Write([]byte("lost")); n != 4 || err != nil {
		t.Fatalf("Write after the cut = %d, %v; want 4, nil (dropped)", n, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read after the cut = %d, %v; want the deadline's error", n, err)
	}
	if _, err := p.dial(context.Background(), "tcp", ln.Addr().String()); !errors.Is(err, errPartitioned) {
		t.Fatalf("dial after the cut: %v, want errPartitioned", err)
	}
	p.reset()
	if err := <-served; err != nil {
		t.Fatalf("echo server: %v", err)
	}
}
