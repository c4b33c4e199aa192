package grpcbarrier_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/internal/testkit/grpctest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/participant/grpcbarrier"
	"github.com/txkit/txkit/participant/grpccall"
	"github.com/txkit/txkit/participant/internal/grpcwire"
)

const (
	secret    = "a-test-secret-of-32-bytes-length"
	oldSecret = "the-previous-secret-32-bytes-lon"
)

// fixture is a participant's gRPC server on a pool of its own, named app in pg_stat_activity.
type fixture struct {
	*grpctest.Server
	pool *pgxpool.Pool
	s    *testenv.Schema
	app  string
	logs *coretest.LogBuffer
}

func newFixture(t *testing.T, opts ...barrier.Option) *fixture {
	t.Helper()
	s := testenv.PG(t)
	app := "txkit-" + testenv.Name(t)
	pool := testenv.AppPool(t, s, app, 4)
	logs := &coretest.LogBuffer{}
	bar, err := barrier.New(pool, append([]barrier.Option{barrier.WithSchema(s.Name), barrier.WithLogger(logs.Logger())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &fixture{Server: grpctest.Start(t, &testenv.Schema{Name: s.Name, URL: s.URL, Pool: pool}, bar), pool: pool, s: s, app: app, logs: logs}
}

func (f *fixture) caller(t *testing.T, opts ...grpccall.Option) *grpccall.Participant {
	t.Helper()
	c, err := grpccall.New(f.Conn, grpctest.Methods(grpctest.TCC...), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func req(gid, branch string, op participant.Op, value string) participant.Request {
	b, _ := grpccall.Payload(wrapperspb.String(value))
	return participant.Request{GID: gid, Branch: branch, Op: op, Payload: b}
}

// idleInTx is the number of the fixture's sessions idle in a transaction.
func (f *fixture) idleInTx(t *testing.T) int {
	var n int
	if err := f.s.Pool.QueryRow(context.Background(), `select count(*) from pg_stat_activity
		where application_name = $1 and state like 'idle in transaction%'`, f.app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// leaksNothing fails the test unless every connection is back in the pool and no session is
// idle in transaction.
func (f *fixture) leaksNothing(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return f.pool.Stat().AcquiredConns() == 0 && f.idleInTx(t) == 0 },
		"%d connections checked out, %d sessions idle in transaction", f.pool.Stat().AcquiredConns(), f.idleInTx(t))
}

// TestIntegrationGRPCBarrier: over gRPC each op runs once (a retried try or cancel is answered OK
// without calling the method again), a cancel before its try is an empty rollback (OK, the method
// not called) and the hanging try after it is refused (Aborted) without calling the method.
func TestIntegrationGRPCBarrier(t *testing.T) {
	f := newFixture(t, barrier.WithSecrets(secret))
	c := f.caller(t, grpccall.WithSecret(secret))
	ctx := t.Context()
	for range 3 {
		if err := c.Do(ctx, req("g1", "b", participant.OpTry, "ok")); err != nil {
			t.Fatalf("try: %v", err)
		}
	}
	for range 2 {
		if err := c.Do(ctx, req("g1", "b", participant.OpCancel, "ok")); err != nil {
			t.Fatalf("cancel: %v", err)
		}
	}
	if try, cancel := f.Ledger(t, "g1", "b", participant.OpTry), f.Ledger(t, "g1", "b", participant.OpCancel); try != 1 || cancel != 1 {
		t.Errorf("g1: %d tries, %d cancels ran; want 1 and 1", try, cancel)
	}
	// The empty rollback, then the hanging try.
	if err := c.Do(ctx, req("g2", "b", participant.OpCancel, "ok")); err != nil {
		t.Fatalf("empty rollback: %v", err)
	}
	err := c.Do(ctx, req("g2", "b", participant.OpTry, "ok"))
	if !errors.Is(err, participant.ErrRefused) || !strings.Contains(err.Error(), "hanging") {
		t.Fatalf("hanging try = %v, want a refusal (Aborted) naming the hanging try", err)
	}
	if try, cancel := f.Ledger(t, "g2", "b", participant.OpTry), f.Ledger(t, "g2", "b", participant.OpCancel); try != 0 || cancel != 0 {
		t.Errorf("g2: %d tries, %d cancels ran; want none", try, cancel)
	}
	f.leaksNothing(t)
}

// signed sends a try of gid/b for msg with the metadata a signing caller sends, changed by
// change (nil: as is), signed with key at ts, and returns the error; md is what was sent.
func signed(ctx context.Context, cc grpc.ClientConnInterface, key string, ts time.Time, gid, nonce string, msg proto.Message,
	change func(md metadata.MD, body *[]byte)) error {
	method := grpctest.Method(participant.OpTry)
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return err
	}
	md := metadata.MD{}
	md.Set(grpcwire.MDGID, gid)
	md.Set(grpcwire.MDBranch, "b")
	md.Set(grpcwire.MDOp, "try")
	md.Set(grpcwire.MDNonce, nonce)
	md.Set(grpcwire.MDTimestamp, strconv.FormatInt(ts.Unix(), 10))
	md.Set(grpcwire.MDSignature, signing.Sign(key, ts.Unix(), grpcwire.SignMethod, grpcwire.Target(method, gid, "b", "try", nonce), body))
	if change != nil {
		change(md, &body)
	}
	var reply []byte
	return cc.Invoke(metadata.NewOutgoingContext(ctx, md), method, body, &reply, grpc.ForceCodec(grpcwire.Codec{}))
}

// TestIntegrationGRPCSignatures: an unsigned, stale, replayed or altered call is refused
// (Unauthenticated, the same answer for each, nothing run or written); both keys of a rotation
// are accepted; a barrier without secrets refuses everything, one built with
// WithUnsignedRequests takes unsigned calls.
func TestIntegrationGRPCSignatures(t *testing.T) {
	f := newFixture(t, barrier.WithSecrets(secret, oldSecret))
	ctx := t.Context()
	msg := wrapperspb.String("ok")
	now := time.Now()
	unauthorized := func(name string, err error) {
		t.Helper()
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "signature missing, invalid, expired or replayed") {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	unsigned, err := grpccall.New(f.Conn, grpctest.Methods(grpctest.TCC...), grpccall.WithUnsigned())
	if err != nil {
		t.Fatal(err)
	}
	unauthorized("unsigned", unsigned.Do(ctx, req("unsigned", "b", participant.OpTry, "ok")))
	unauthorized("stale", signed(ctx, f.Conn, secret, now.Add(-barrier.DefaultSignatureWindow-time.Minute), "stale", "n1", msg, nil))
	unauthorized("from the future", signed(ctx, f.Conn, secret, now.Add(barrier.DefaultSignatureWindow+time.Minute), "future", "n1", msg, nil))
	unauthorized("wrong key", signed(ctx, f.Conn, "a-third-secret-nobody-was-given!!", now, "wrongkey", "n1", msg, nil))
	unauthorized("altered message", signed(ctx, f.Conn, secret, now, "altered-msg", "n1", msg, func(_ metadata.MD, body *[]byte) {
		*body, _ = proto.Marshal(wrapperspb.String("okay"))
	}))
	unauthorized("altered gid", signed(ctx, f.Conn, secret, now, "altered-gid", "n1", msg, func(md metadata.MD, _ *[]byte) {
		md.Set(grpcwire.MDGID, "another-gid")
	}))
	unauthorized("altered op", signed(ctx, f.Conn, secret, now, "altered-op", "n1", msg, func(md metadata.MD, _ *[]byte) {
		md.Set(grpcwire.MDOp, "cancel")
	}))
	unauthorized("altered nonce", signed(ctx, f.Conn, secret, now, "altered-nonce", "n1", msg, func(md metadata.MD, _ *[]byte) {
		md.Set(grpcwire.MDNonce, "n2")
	}))
	// A replay: the same call, byte for byte, a second time.
	if err := signed(ctx, f.Conn, secret, now, "replayed", "n1", msg, nil); err != nil {
		t.Fatalf("first send: %v", err)
	}
	unauthorized("replayed", signed(ctx, f.Conn, secret, now, "replayed", "n1", msg, nil))
	if n := f.Ledger(t, "replayed", "b", participant.OpTry); n != 1 {
		t.Errorf("replayed: the try ran %d times, want once", n)
	}
	for _, gid := range []string{"unsigned", "stale", "future", "wrongkey", "altered-msg", "altered-gid", "another-gid", "altered-op", "altered-nonce"} {
		if n := f.Ledger(t, gid, "", participant.OpTry) + f.Ledger(t, gid, "", participant.OpCancel); n != 0 {
			t.Errorf("%s: %d ops ran, want none", gid, n)
		}
	}
	// Rotation: the old key is still accepted.
	if err := f.caller(t, grpccall.WithSecret(oldSecret)).Do(ctx, req("rotated", "b", participant.OpTry, "ok")); err != nil {
		t.Errorf("signed with the old key: %v", err)
	}
	if l := f.logs.String(); !strings.Contains(l, "call refused") || !strings.Contains(l, "signature does not verify") {
		t.Errorf("the log does not say why calls were refused:\n%s", l)
	}

	// No secret: everything refused. The opt-out: unsigned calls served.
	none := newFixture(t)
	_, err = grpccall.New(none.Conn, grpctest.Methods(grpctest.TCC...))
	if err == nil {
		t.Error("grpccall.New without WithSecret or WithUnsigned succeeded")
	}
	unauthorized("no secret", none.caller(t, grpccall.WithSecret(secret)).Do(ctx, req("none", "b", participant.OpTry, "ok")))
	open := newFixture(t, barrier.WithUnsignedRequests())
	if err := open.caller(t, grpccall.WithUnsigned()).Do(ctx, req("open", "b", participant.OpTry, "ok")); err != nil {
		t.Errorf("unsigned call to a barrier WithUnsignedRequests: %v", err)
	}
}

func (*fixture) callerOn(t *testing.T, g *fixture, opts ...grpccall.Option) *grpccall.Participant {
	return g.caller(t, opts...)
}

// TestIntegrationGRPCPanicLeaksNothing: a panicking method is rolled back and answered Internal
// with only a request id (the panic's text and stack are in the log); no connection stays checked
// out and no session idle in transaction, and the branch's cancel is an empty rollback.
func TestIntegrationGRPCPanicLeaksNothing(t *testing.T) {
	f := newFixture(t, barrier.WithSecrets(secret))
	c := f.caller(t, grpccall.WithSecret(secret))
	for i := range 6 { // more than the pool's 4 connections
		err := c.Do(t.Context(), req("g1", "b"+strconv.Itoa(i), participant.OpTry, "panic"))
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "request id") || strings.Contains(err.Error(), "s3cr3t") {
			t.Fatalf("panicking try = %v, want Internal with a request id and not the panic's text", err)
		}
	}
	f.leaksNothing(t)
	if err := c.Do(t.Context(), req("g1", "b0", participant.OpCancel, "ok")); err != nil {
		t.Fatalf("cancel after the panic: %v", err)
	}
	if n := f.Ledger(t, "g1", "b0", participant.OpCancel); n != 0 {
		t.Errorf("the cancel ran the method; want an empty rollback")
	}
	if l := f.logs.String(); !strings.Contains(l, "s3cr3t") || !strings.Contains(l, "stack=") || !strings.Contains(l, "request_id=") {
		t.Errorf("the log does not hold the panic with its stack and request id:\n%s", l)
	}
}

// TestIntegrationGRPCCancelledMidOp: a call whose ctx ends while the method works (the caller's
// deadline passes) leaves nothing behind: the method's write and the op's marker are rolled back,
// the connection is back and no session is idle in transaction; the retried op then runs.
func TestIntegrationGRPCCancelledMidOp(t *testing.T) {
	f := newFixture(t, barrier.WithSecrets(secret))
	c := f.caller(t, grpccall.WithSecret(secret))
	entered := make(chan struct{}, 1)
	f.SetHook(func(ctx context.Context, r participant.Request, v string) error {
		if v != "slow" {
			return nil
		}
		if _, err := grpcbarrier.Tx(ctx).Exec(ctx, `insert into grpc_ledger (gid, branch, op, value) values ($1, $2, 'try', 'partial')`, r.GID, r.Branch); err != nil {
			return err
		}
		entered <- struct{}{}
		<-ctx.Done() // the caller gave up
		return ctx.Err()
	})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err := c.Do(ctx, req("g1", "b", participant.OpTry, "slow"))
	if status.Code(err) != codes.DeadlineExceeded || errors.Is(err, participant.ErrRefused) {
		t.Fatalf("slow try = %v, want DeadlineExceeded (retried)", err)
	}
	<-entered
	f.leaksNothing(t)
	if n := f.Ledger(t, "g1", "b", participant.OpTry); n != 0 {
		t.Errorf("%d rows of the cancelled try committed, want 0", n)
	}
	f.SetHook(nil)
	if err := c.Do(t.Context(), req("g1", "b", participant.OpTry, "ok")); err != nil {
		t.Fatalf("retried try: %v", err)
	}
	if n := f.Ledger(t, "g1", "b", participant.OpTry); n != 1 {
		t.Errorf("the retried try ran %d times, want once (the cancelled one left no marker)", n)
	}
}

func TestUnaryServerInterceptorChecksItsArguments(t *testing.T) {
	if _, err := grpcbarrier.UnaryServerInterceptor(nil); !errors.Is(err, grpcbarrier.ErrInvalidOption) {
		t.Errorf("nil barrier: %v, want ErrInvalidOption", err)
	}
	if _, err := grpcbarrier.UnaryServerInterceptor(&barrier.Barrier{}); !errors.Is(err, grpcbarrier.ErrInvalidOption) {
		t.Errorf("a Barrier not made by barrier.New: %v, want ErrInvalidOption", err)
	}
	bar, err := barrier.New(&pgxpool.Pool{}, barrier.WithSecrets(secret)) // New does no I/O
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"shop.Inventory/Reserve", "/"} {
		if _, err := grpcbarrier.UnaryServerInterceptor(bar, m); !errors.Is(err, grpcbarrier.ErrInvalidOption) {
			t.Errorf("method %q: %v, want ErrInvalidOption", m, err)
		}
	}
	if _, err := grpcbarrier.UnaryServerInterceptor(bar, "/shop.Inventory/", "/shop.Wallet/Credit"); err != nil {
		t.Errorf("a service and a method: %v", err)
	}
	if _, ok := grpcbarrier.Request(context.Background()); ok || grpcbarrier.Tx(context.Background()) != nil {
		t.Error("Request or Tx outside a guarded call")
	}
}

// TestIntegrationGRPCAnswers: what a method's error becomes. An error wrapping
// participant.ErrRefused is answered Aborted with its reason, one wrapping ErrBadRequest
// InvalidArgument, the method's own status as it is, any other error Internal with only a request
// id; a call without txkit metadata to an unsigned barrier is InvalidArgument. Each is rolled back.
func TestIntegrationGRPCAnswers(t *testing.T) {
	f := newFixture(t, barrier.WithSecrets(secret))
	c := f.caller(t, grpccall.WithSecret(secret))
	const internal = "connect to db-internal.example as txkit_admin failed"
	f.SetHook(func(ctx context.Context, r participant.Request, v string) error {
		_, _ = grpcbarrier.Tx(ctx).Exec(ctx, `insert into grpc_ledger (gid, branch, op, value) values ($1, $2, 'try', 'partial')`, r.GID, r.Branch)
		switch v {
		case "refused":
			return fmt.Errorf("out of apples: %w", participant.ErrRefused)
		case "bad":
			return fmt.Errorf("no such sku: %w", participant.ErrBadRequest)
		case "unavailable":
			return status.Error(codes.Unavailable, "the warehouse is offline")
		case "internal":
			return errors.New(internal)
		}
		return nil
	})
	for _, tc := range []struct {
		value string
		code  codes.Code
		text  string
	}{
		{"refused", codes.Aborted, "participant: refused: out of apples"},
		{"bad", codes.InvalidArgument, "no such sku"},
		{"unavailable", codes.Unavailable, "the warehouse is offline"},
		{"internal", codes.Internal, "participant: internal error (request id "},
	} {
		err := c.Do(t.Context(), req("g-"+tc.value, "b", participant.OpTry, tc.value))
		st, _ := status.FromError(errors.Unwrap(err))
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.text) || strings.Contains(err.Error(), "db-internal") {
			t.Errorf("%s: %v (status %v), want %s with %q", tc.value, err, st, tc.code, tc.text)
		}
		if refused := errors.Is(err, participant.ErrRefused); refused != (tc.code == codes.Aborted) {
			t.Errorf("%s: refused %v", tc.value, refused)
		}
		if n := f.Ledger(t, "g-"+tc.value, "b", participant.OpTry); n != 0 {
			t.Errorf("%s: %d rows committed, want 0", tc.value, n)
		}
	}
	if !strings.Contains(f.logs.String(), "txkit_admin") {
		t.Errorf("the internal error is not in the log:\n%s", f.logs.String())
	}

	open := newFixture(t, barrier.WithUnsignedRequests())
	var reply []byte
	err := open.Conn.Invoke(t.Context(), grpctest.Method(participant.OpTry), []byte{}, &reply, grpc.ForceCodec(grpcwire.Codec{}))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a call without txkit metadata: %v, want InvalidArgument", err)
	}
}

// Methods the interceptor is not given pass through untouched: no metadata, no transaction.
func TestUnguardedMethodsPassThrough(t *testing.T) {
	bar, err := barrier.New(&pgxpool.Pool{}, barrier.WithSecrets(secret)) // New does no I/O
	if err != nil {
		t.Fatal(err)
	}
	ic, err := grpcbarrier.UnaryServerInterceptor(bar, "/shop.Inventory/")
	if err != nil {
		t.Fatal(err)
	}
	called := false
	resp, err := ic(t.Context(), wrapperspb.String("x"), &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"},
		func(ctx context.Context, _ any) (any, error) {
			called = grpcbarrier.Tx(ctx) == nil
			return "ok", nil
		})
	if !called || resp != "ok" || err != nil {
		t.Fatalf("unguarded method: called %v, %v, %v", called, resp, err)
	}
}
