// Package grpcwire is what the two gRPC packages of txkit share: participant/grpccall, which
// calls participants' gRPC methods, and participant/grpcbarrier, which serves them. It holds the
// metadata keys of a call, what its signature covers, the raw-bytes codec and the metadata
// carrier of the W3C trace context. It is the only place besides them that imports gRPC, so
// programs that use HTTP participants only do not link it.
package grpcwire

import (
	"fmt"
	"net/url"

	"google.golang.org/grpc/metadata"
)

// The metadata keys of a call of a participant's method (gRPC metadata keys are lower case).
const (
	MDGID       = "txkit-gid"
	MDBranch    = "txkit-branch"
	MDOp        = "txkit-op"
	MDNonce     = "txkit-nonce"     // random per call: two sends of one op differ
	MDTimestamp = "txkit-timestamp" // Unix seconds when the call was signed
	MDSignature = "txkit-signature" // "v1=" + hex HMAC-SHA256 (internal/signing)
)

// SignMethod is the method line of a gRPC call's signature (internal/signing.Sign): no HTTP
// request has it, so a signed call never verifies as an HTTP request, or the other way round.
const SignMethod = "GRPC"

// Target is the target line of a call's signature: the full method and the txkit metadata,
// query-encoded (no line break can hide in it), so that none of them can be changed without the
// secret. The message bytes are the signature's body.
func Target(fullMethod, gid, branch, op, nonce string) string {
	// url.Values{"gid": {gid}, "branch": {branch}, "op": {op}, "nonce": {nonce}}.Encode(), written
	// out (keys in its sorted order) without the map and the sort.
	return fullMethod + "?branch=" + url.QueryEscape(branch) + "&gid=" + url.QueryEscape(gid) +
		"&nonce=" + url.QueryEscape(nonce) + "&op=" + url.QueryEscape(op)
}

// Codec sends and receives a message's bytes as they are: the caller holds the message
// serialized (a branch's stored payload), so txkit needs no generated code. Its name is "proto",
// so the call's content type is application/grpc+proto and the participant's server decodes the
// bytes with its own generated types.
type Codec struct{}

// Marshal returns v, a []byte or *[]byte, as is.
func (Codec) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case []byte:
		return v, nil
	case *[]byte:
		return *v, nil
	}
	return nil, fmt.Errorf("grpcwire: cannot send a %T as raw bytes", v)
}

// Unmarshal copies data into v, a *[]byte.
func (Codec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("grpcwire: cannot receive raw bytes into a %T", v)
	}
	*p = append((*p)[:0], data...)
	return nil
}

// Name is "proto": see [Codec].
func (Codec) Name() string { return "proto" }

// Carrier adapts gRPC metadata to OpenTelemetry's TextMapCarrier (keys lower case, as gRPC's).
type Carrier metadata.MD

// Get returns the first value of key.
func (c Carrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (c Carrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys returns the keys present.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
