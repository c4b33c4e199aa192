package grpccall_test

import (
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/grpccall"
)

func TestNewChecksItsArguments(t *testing.T) {
	var cc grpc.ClientConnInterface = &grpc.ClientConn{} // never dialled: New does no I/O
	try := grpccall.Methods{participant.OpTry: "/shop.Inventory/Reserve"}
	for _, tc := range []struct {
		name    string
		cc      grpc.ClientConnInterface
		methods grpccall.Methods
		opts    []grpccall.Option
		ok      bool
	}{
		{"signed", cc, try, []grpccall.Option{grpccall.WithSecret(secret)}, true},
		{"unsigned opt-out", cc, try, []grpccall.Option{grpccall.WithUnsigned()}, true},
		{"neither secret nor opt-out", cc, try, nil, false},
		{"short secret", cc, try, []grpccall.Option{grpccall.WithSecret("short")}, false},
		{"both", cc, try, []grpccall.Option{grpccall.WithSecret(secret), grpccall.WithUnsigned()}, false},
		{"nil connection", nil, try, []grpccall.Option{grpccall.WithSecret(secret)}, false},
		{"no method", cc, nil, []grpccall.Option{grpccall.WithSecret(secret)}, false},
		{"not a full method", cc, grpccall.Methods{participant.OpTry: "Reserve"}, []grpccall.Option{grpccall.WithSecret(secret)}, false},
		{"unknown op", cc, grpccall.Methods{participant.Op(99): "/a.B/C"}, []grpccall.Option{grpccall.WithSecret(secret)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := grpccall.New(tc.cc, tc.methods, tc.opts...)
			if tc.ok && (err != nil || p.Transport() != "grpc") {
				t.Fatalf("New = %v, %v", p, err)
			}
			if !tc.ok && !errors.Is(err, grpccall.ErrInvalidOption) {
				t.Fatalf("New = %v, want ErrInvalidOption", err)
			}
		})
	}
}

// A payload is JSON (the coordinator stores it with the branch) holding the message's
// deterministic encoding.
func TestPayload(t *testing.T) {
	msg := wrapperspb.String("apple")
	p, err := grpccall.Payload(msg)
	if err != nil || !json.Valid(p) {
		t.Fatalf("Payload = %s, %v", p, err)
	}
	var b []byte
	if err := json.Unmarshal(p, &b); err != nil {
		t.Fatal(err)
	}
	want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if string(b) != string(want) {
		t.Fatalf("payload bytes %x, want %x", b, want)
	}
	// A payload that is not one of Payload's is a bad request, refused before any call.
	c, err := grpccall.New(&grpc.ClientConn{}, grpccall.Methods{participant.OpTry: "/a.B/C"}, grpccall.WithUnsigned())
	if err != nil {
		t.Fatal(err)
	}
	err = c.Do(t.Context(), participant.Request{GID: "g", Branch: "b", Op: participant.OpTry, Payload: json.RawMessage(`{"sku":"apple"}`)})
	if !errors.Is(err, participant.ErrBadRequest) {
		t.Fatalf("Do with a JSON object payload = %v, want ErrBadRequest", err)
	}
	err = c.Do(t.Context(), participant.Request{GID: "g", Branch: "b", Op: participant.OpConfirm})
	if !errors.Is(err, participant.ErrBadRequest) {
		t.Fatalf("Do of an op without a method = %v, want ErrBadRequest", err)
	}
}
