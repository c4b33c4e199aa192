package grpccall

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/internal/grpcwire"
	"github.com/txkit/txkit/participant/internal/refusal"
)

// ErrInvalidOption: [New] was given a connection, methods or options it cannot use. Callers
// match it with [errors.Is].
var ErrInvalidOption = errors.New("grpccall: invalid option")

// Methods names the full gRPC method ("/package.Service/Method") each op of a branch calls:
// OpTry, OpConfirm and OpCancel for TCC; OpAction and OpCompensate for a saga step; OpPrepare,
// OpCommit and OpAbort for two-phase commit; OpCanCommit, OpPreCommit, OpDoCommit and OpAbort
// for three-phase commit. Ops may share a method: the op is in the call's metadata.
type Methods map[participant.Op]string

// Option configures a [Participant].
type Option func(*options)

type options struct {
	secret   string
	unsigned bool
}

// WithSecret signs every call with secret (at least 16 bytes), which the participant's
// grpcbarrier interceptor verifies (barrier.WithSecrets there: during a key rotation the
// participants accept both keys first, then the coordinators sign with the new one).
func WithSecret(secret string) Option { return func(o *options) { o.secret = secret } }

// WithUnsigned sends calls unsigned: the explicit opt-out, for participants whose barrier is
// built with barrier.WithUnsignedRequests behind mutual TLS (docs/security.md). It cannot be
// combined with [WithSecret].
func WithUnsigned() Option { return func(o *options) { o.unsigned = true } }

// Participant is a participant reached by calling a gRPC method per op on a connection. Register
// it with the coordinator (Register(name, p)) and put the handle returned in branches. It is safe
// for concurrent use by multiple goroutines.
type Participant struct {
	cc      grpc.ClientConnInterface
	methods Methods
	o       options
	codec   grpc.CallOption // the raw-bytes codec, made once
}

// New returns a participant calling methods on cc. Either [WithSecret] or [WithUnsigned] is
// required: a participant that would send calls its barrier refuses is an error. A nil cc, no
// method, a method name that does not start with "/", a short secret or both options return an
// error wrapping [ErrInvalidOption].
func New(cc grpc.ClientConnInterface, methods Methods, opts ...Option) (*Participant, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case cc == nil:
		return nil, fmt.Errorf("grpccall: nil connection: %w", ErrInvalidOption)
	case len(methods) == 0:
		return nil, fmt.Errorf("grpccall: no method: %w", ErrInvalidOption)
	case o.unsigned && o.secret != "":
		return nil, fmt.Errorf("grpccall: both WithSecret and WithUnsigned: %w", ErrInvalidOption)
	case !o.unsigned:
		if err := signing.CheckSecrets([]string{o.secret}); err != nil {
			return nil, fmt.Errorf("grpccall: secret (WithSecret, or WithUnsigned behind mutual TLS): %w: %w", err, ErrInvalidOption)
		}
	}
	m := make(Methods, len(methods))
	for op, name := range methods {
		if _, err := op.MarshalText(); err != nil {
			return nil, fmt.Errorf("grpccall: %w: %w", err, ErrInvalidOption)
		}
		if len(name) < 2 || name[0] != '/' {
			return nil, fmt.Errorf("grpccall: method %q of %s is not a full method name (\"/package.Service/Method\"): %w", name, op, ErrInvalidOption)
		}
		m[op] = name
	}
	return &Participant{cc: cc, methods: m, o: o, codec: grpc.ForceCodec(grpcwire.Codec{})}, nil
}

// Transport returns "grpc", the transport label of the coordinator's branch-call metrics.
func (p *Participant) Transport() string { return "grpc" }

// Do calls the method of req.Op with the message in req.Payload ([Payload]; empty: an empty
// message), signed, with the txkit metadata and ctx's trace context and deadline. It returns nil
// for OK, an error wrapping [participant.ErrRefused] for Aborted or FailedPrecondition (a
// business refusal; status.FromError finds its status too), an error wrapping [participant.ErrBadRequest] for an op without a method or
// a payload that is not one of [Payload]'s, and any other failure wrapped with its gRPC status
// (status.FromError finds it) for the coordinator to retry. It blocks until the answer or ctx's
// end.
func (p *Participant) Do(ctx context.Context, req participant.Request) error {
	method := p.methods[req.Op]
	if method == "" {
		return fmt.Errorf("participant: %s %s/%s: no gRPC method for op %s: %w", req.Op, req.GID, req.Branch, req.Op, participant.ErrBadRequest)
	}
	body, err := decodePayload(req.Payload)
	if err != nil {
		return fmt.Errorf("participant: %s %s/%s: %w", req.Op, req.GID, req.Branch, err)
	}
	op, nonce := req.Op.String(), rand.Text()
	// The keys are lower case already: set them directly (MD.Set lowers each key), one backing
	// array for the values.
	vals := [6]string{req.GID, req.Branch, op, nonce}
	md := make(metadata.MD, 8)
	md[grpcwire.MDGID], md[grpcwire.MDBranch], md[grpcwire.MDOp], md[grpcwire.MDNonce] = vals[0:1:1], vals[1:2:2], vals[2:3:3], vals[3:4:4]
	if !p.o.unsigned {
		ts := time.Now().Unix()
		vals[4] = strconv.FormatInt(ts, 10)
		vals[5] = signing.Sign(p.o.secret, ts, grpcwire.SignMethod, grpcwire.Target(method, req.GID, req.Branch, op, nonce), body)
		md[grpcwire.MDTimestamp], md[grpcwire.MDSignature] = vals[4:5:5], vals[5:6:6]
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		obs.Propagator().Inject(ctx, grpcwire.Carrier(md))
	}
	if old, ok := metadata.FromOutgoingContext(ctx); ok { // the caller's metadata, ours winning
		for k, v := range md {
			old[k] = v // old is FromOutgoingContext's copy
		}
		md = old
	}
	var reply []byte
	err = p.cc.Invoke(metadata.NewOutgoingContext(ctx, md), method, body, &reply, p.codec)
	if err == nil {
		return nil
	}
	switch st, _ := status.FromError(err); st.Code() {
	case codes.Aborted, codes.FailedPrecondition:
		msg := fmt.Sprintf("participant: %s %s/%s at grpc %s: %v", req.Op, req.GID, req.Branch, method, participant.ErrRefused)
		if reason := refusal.Reason(st.Message(), participant.ErrRefused.Error()); reason != "" {
			msg += ": " + reason
		}
		return &refused{msg: msg, st: st}
	}
	return fmt.Errorf("participant: %s %s/%s at grpc %s: %w", req.Op, req.GID, req.Branch, method, err)
}

// refused is a refusal: it wraps participant.ErrRefused and keeps the call's gRPC status.
type refused struct {
	msg string
	st  *status.Status
}

func (e *refused) Error() string              { return e.msg }
func (e *refused) Unwrap() error              { return participant.ErrRefused }
func (e *refused) GRPCStatus() *status.Status { return e.st }

// Payload returns the payload of a branch whose ops send msg: its deterministic protobuf
// encoding, as a JSON string (base64), which the coordinator stores with the branch and sends
// with every op. Deterministic, because the participant's interceptor verifies the signature
// over the message as it re-encodes it.
func Payload(msg proto.Message) (json.RawMessage, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("grpccall: encode %T: %w", msg, err)
	}
	return encodePayload(b), nil
}

func encodePayload(b []byte) json.RawMessage {
	out, _ := json.Marshal(b) // a []byte is a base64 JSON string: it cannot fail
	return out
}

func decodePayload(p json.RawMessage) ([]byte, error) {
	if len(p) == 0 || string(p) == "null" {
		return nil, nil
	}
	// Payload's encoding, a JSON string of standard base64 (no escape in it), decodes directly;
	// anything else goes through encoding/json, which says what is wrong.
	if n := len(p); n >= 2 && p[0] == '"' && p[n-1] == '"' && bytes.IndexByte(p[1:n-1], '\\') < 0 {
		if b, err := base64.StdEncoding.AppendDecode(nil, p[1:n-1]); err == nil {
			return b, nil
		}
	}
	var b []byte
	if err := json.Unmarshal(p, &b); err != nil {
		return nil, fmt.Errorf("payload is not a message of grpccall.Payload: %w: %w", participant.ErrBadRequest, err)
	}
	return b, nil
}
