package grpcbarrier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/txkit/txkit/internal/barrierseam"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/participant/internal/grpcwire"
)

// ErrInvalidOption: [UnaryServerInterceptor] was given no barrier or a method pattern it cannot
// use. Callers match it with [errors.Is].
var ErrInvalidOption = errors.New("grpcbarrier: invalid option")

// call is what a guarded method finds in its ctx.
type call struct {
	tx  pgx.Tx
	req participant.Request
}

type ctxKey struct{}

// Tx returns the transaction a guarded method runs in — the participant's own, in which the
// barrier wrote the op's marker; the interceptor commits it when the method returns no error and
// rolls it back otherwise: do not commit or roll it back yourself — or nil when ctx is not a
// guarded call's.
func Tx(ctx context.Context) pgx.Tx {
	if c, ok := ctx.Value(ctxKey{}).(*call); ok {
		return c.tx
	}
	return nil
}

// Request returns the gid, branch and op of the guarded call ctx belongs to (its Payload is
// empty: the method has the message), and false when ctx is not a guarded call's.
func Request(ctx context.Context) (participant.Request, bool) {
	if c, ok := ctx.Value(ctxKey{}).(*call); ok {
		return c.req, true
	}
	return participant.Request{}, false
}

// UnaryServerInterceptor returns the interceptor that serves the calls of methods through b (see
// the package doc). Each of methods is a full method name ("/shop.Inventory/Reserve") or a
// service's prefix ending in "/" ("/shop.Inventory/"); calls of other methods pass through
// untouched. With no methods every unary call is guarded, and a call without txkit metadata is
// refused. A nil b or a pattern that does not start with "/" returns an error wrapping
// [ErrInvalidOption]. The interceptor is safe for concurrent use.
func UnaryServerInterceptor(b *barrier.Barrier, methods ...string) (grpc.UnaryServerInterceptor, error) {
	if b == nil {
		return nil, fmt.Errorf("grpcbarrier: nil barrier: %w", ErrInvalidOption)
	}
	seam := barrierseam.Of(b)
	if seam == nil || seam.Serve == nil {
		return nil, fmt.Errorf("grpcbarrier: a barrier not made by barrier.New: %w", ErrInvalidOption)
	}
	for _, m := range methods {
		if len(m) < 2 || m[0] != '/' {
			return nil, fmt.Errorf("grpcbarrier: method %q is neither \"/package.Service/Method\" nor \"/package.Service/\": %w", m, ErrInvalidOption)
		}
	}
	g := &guard{b: seam, methods: append([]string(nil), methods...)}
	return g.intercept, nil
}

type guard struct {
	b       *barrierseam.Barrier
	methods []string
}

// guarded reports whether calls of fullMethod go through the barrier.
func (g *guard) guarded(fullMethod string) bool {
	if len(g.methods) == 0 {
		return true
	}
	for _, m := range g.methods {
		if m == fullMethod || (strings.HasSuffix(m, "/") && strings.HasPrefix(fullMethod, m)) {
			return true
		}
	}
	return false
}

func (g *guard) intercept(ctx context.Context, msg any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !g.guarded(info.FullMethod) {
		return handler(ctx, msg)
	}
	// One key at a time: FromIncomingContext would copy every header of the call.
	get := func(k string) string {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) == 1 {
			return v[0]
		}
		return "" // missing, or sent twice: neither is a coordinator's call
	}
	req := participant.Request{GID: get(grpcwire.MDGID), Branch: get(grpcwire.MDBranch)}
	op := get(grpcwire.MDOp)
	nonce, err := g.authenticate(info.FullMethod, req, op, get, msg)
	if err != nil {
		return nil, g.unauthorized(ctx, info.FullMethod, err)
	}
	if req.Op, err = participant.ParseOp(op); err != nil {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("participant: txkit metadata: %v", err))
	}
	var (
		resp any
		herr error // the method's own error
	)
	sctx, err := g.b.Serve(obs.Propagator().Extract(ctx, incoming{ctx}), req, nonce,
		func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
			resp, herr = handler(context.WithValue(ctx, ctxKey{}, &call{tx: tx, req: req}), msg)
			return herr
		})
	switch {
	case err == nil && herr == nil && resp == nil:
		// Skipped (a duplicate, an empty rollback): the method was not called. An empty message
		// encodes to no bytes, which decode as any reply type.
		return &emptypb.Empty{}, nil
	case err == nil:
		return resp, nil
	case errors.Is(err, barrier.ErrUnauthorized): // a replay: the nonce was claimed before
		return nil, g.unauthorized(ctx, info.FullMethod, err)
	case errors.Is(err, participant.ErrBadRequest):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, participant.ErrRefused): // the method's or a hanging try
		return nil, status.Error(codes.Aborted, g.b.Refusal(req, err))
	}
	if herr != nil { // the method failed (a panic leaves herr nil)
		if st, ok := status.FromError(herr); ok {
			return nil, st.Err() // the method chose its status (FailedPrecondition, Unavailable, ...)
		}
	}
	if ctx.Err() != nil { // the caller is gone (cancelled, or its deadline passed): rolled back
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	id := g.b.Internal(sctx, req, err)
	return nil, status.Error(codes.Internal, "participant: internal error (request id "+id+")")
}

// authenticate checks the call's signature over fullMethod, the txkit metadata (req's gid and
// branch, op, and the nonce, timestamp and signature that get reads) and msg's bytes; it returns
// the signature, to be claimed as a nonce, or an error wrapping barrier.ErrUnauthorized. A
// barrier built with WithUnsignedRequests accepts every call (and returns no nonce); one given no
// secret refuses every call.
func (g *guard) authenticate(fullMethod string, req participant.Request, op string, get func(string) string, msg any) (string, error) {
	switch {
	case g.b.Unsigned:
		return "", nil
	case len(g.b.Secrets) == 0:
		return "", fmt.Errorf("participant: this barrier has no secret to verify calls with (barrier.WithSecrets): %w", barrier.ErrUnauthorized)
	}
	body, err := messageBytes(msg)
	if err != nil {
		return "", fmt.Errorf("%w: %w", barrier.ErrUnauthorized, err)
	}
	sig := get(grpcwire.MDSignature)
	target := grpcwire.Target(fullMethod, req.GID, req.Branch, op, get(grpcwire.MDNonce))
	if err := signing.Verify(get(grpcwire.MDTimestamp), sig, g.b.Secrets, time.Now(), g.b.Window, grpcwire.SignMethod, target, body); err != nil {
		return "", fmt.Errorf("%w: %w", barrier.ErrUnauthorized, err)
	}
	return sig, nil
}

// messageBytes is the encoding the caller signed: the deterministic protobuf encoding of a
// message (grpccall.Payload encodes it so), or the bytes of a server using a raw codec.
func messageBytes(msg any) ([]byte, error) {
	switch m := msg.(type) {
	case proto.Message:
		return proto.MarshalOptions{Deterministic: true}.Marshal(m)
	case *[]byte:
		return *m, nil
	case []byte:
		return m, nil
	}
	return nil, fmt.Errorf("cannot verify a signature over a %T", msg)
}

// unauthorized logs err and answers Unauthenticated without saying which check failed.
func (g *guard) unauthorized(ctx context.Context, method string, err error) error {
	level := slog.LevelWarn
	if !g.b.Unsigned && len(g.b.Secrets) == 0 {
		level = slog.LevelError // misconfigured: no call can pass
	}
	g.b.Log.Log(ctx, level, "participant: call refused", slog.String("method", method), slog.Any("err", err))
	return status.Error(codes.Unauthenticated, "participant: unauthorized: call signature missing, invalid, expired or replayed")
}

// incoming is the TextMapCarrier of a call's incoming metadata, read one key at a time.
type incoming struct{ ctx context.Context }

func (c incoming) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (incoming) Set(string, string) {} // the incoming metadata is read only

func (c incoming) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	return grpcwire.Carrier(md).Keys()
}
