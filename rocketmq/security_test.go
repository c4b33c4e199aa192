package rocketmq_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// A message larger than the Consumer's limit goes to poison and never reaches the handler: here a
// 5 MiB body that the client compressed on the way (the broker stores a few KiB) and inflated on
// receipt, over the default limit. The small message after it, on the same key and queue, is
// applied, so the large one was seen first.
func TestIntegrationOversizedMessagePoison(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := &recorder{}
	c := newConsumer(t, e, group(t, "oversized"), rec.handler(nil), rocketmq.WithOrderly(time.Second))
	run(t, c)
	pub := newPublisher(t, e)

	big := outbox.Message{ID: uuid.New(), Topic: e.topic, Key: "k", Body: make([]byte, 5<<20)}
	small := outbox.Message{ID: uuid.New(), Topic: e.topic, Key: "k", Body: []byte("small")}
	for _, m := range []outbox.Message{big, small} {
		if err := pub.Publish(t.Context(), m); err != nil {
			t.Fatalf("publish %d bytes: %v", len(m.Body), err)
		}
	}
	// The handler's call is recorded before its transaction commits and Stats counts it: wait for both.
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		return rec.count(func(m outbox.Message) bool { return m.ID == small.ID }) == 1 && c.Stats().Applied == 1
	}, "the small message after the large one was not applied")
	if n := rec.count(func(m outbox.Message) bool { return m.ID == big.ID }); n != 0 {
		t.Fatalf("the handler was given the %d-byte message %d times; want it refused as poison", len(big.Body), n)
	}
	if s := c.Stats(); s.Poison != 1 || s.Applied != 1 {
		t.Fatalf("stats %+v, want 1 poison and 1 applied", s)
	}
	if !contains(e.logs.String(), "oversized message") {
		t.Fatalf("the refusal was not logged:\n%s", e.logs.String())
	}
}

// rogueChildEnv selects the child process of TestPanicHandlerRogueNameServer: "handler" installs
// NewPanicHandler, "none" leaves the client's hook nil as it is by default.
const rogueChildEnv = "TXKIT_TEST_ROGUE_NAMESERVER_CHILD"

// A rogue name server answers the client's route request with a negative frame length; the
// client's connection reader then panics in make. Without a panic handler (the client's default)
// that ends the process; with NewPanicHandler the panic is logged and Publish fails with an
// error. Each case runs in a child process, since the first one dies.
func TestPanicHandlerRogueNameServer(t *testing.T) {
	if mode := os.Getenv(rogueChildEnv); mode != "" {
		rogueChild(t, mode)
		return
	}
	for _, tc := range []struct {
		mode     string
		survives bool
	}{
		{"handler", true},
		{"none", false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPanicHandlerRogueNameServer$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), rogueChildEnv+"="+tc.mode)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("child: %v", err)
			}
			survived := err == nil && bytes.Contains(out, []byte("child survived"))
			switch {
			case tc.survives && !survived:
				t.Fatalf("the process died of the client's panic (%v):\n%s", err, out)
			case tc.survives && !bytes.Contains(out, []byte("panic in a client goroutine recovered")):
				t.Fatalf("the panic was not logged:\n%s", out)
			case !tc.survives && (survived || !bytes.Contains(out, []byte("panic: runtime error: makeslice"))):
				t.Fatalf("without a panic handler the client's panic should end the process (%v):\n%s", err, out)
			}
			t.Logf("child (%s): exit %v, %d bytes of output", tc.mode, err, len(out))
		})
	}
}

// rogueChild runs a rogue name server and publishes through it.
func rogueChild(t *testing.T, mode string) {
	if mode == "handler" {
		primitive.PanicHandler = rocketmq.NewPanicHandler(slog.New(slog.NewTextHandler(os.Stderr, nil)))
		defer func() { primitive.PanicHandler = nil }()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan net.Conn, 1)
	go func() {
		defer close(conns)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		conns <- conn
		var req [4]byte
		if _, err := io.ReadFull(conn, req[:]); err != nil {
			return
		}
		_, _ = conn.Write([]byte{0xff, 0xff, 0xff, 0xff}) // frame length -1
	}()

	pub, err := rocketmq.NewPublisher(t.Context(), []string{ln.Addr().String()},
		rocketmq.WithRetries(0, 3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(t.Context(), outbox.Message{ID: uuid.New(), Topic: "txkit-rogue", Body: []byte("x")})
	_ = pub.Close()
	if err == nil {
		t.Fatal("published through a rogue name server")
	}
	_ = ln.Close()
	for conn := range conns {
		_ = conn.Close()
	}
	t.Logf("child survived: publish failed with %v", err)
}
