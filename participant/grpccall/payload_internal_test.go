package grpccall

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/txkit/txkit/participant"
)

// TestDecodePayloadAsJSON: decodePayload's direct base64 path decodes what encoding/json decodes
// and refuses what it refuses.
func TestDecodePayloadAsJSON(t *testing.T) {
	for _, p := range []string{
		string(encodePayload([]byte{0x0a, 0x04, 's', 'k', 'u', '1', 0x10, 0x01})),
		string(encodePayload(bytes.Repeat([]byte{0xfb, 0xff}, 40))), // '+' and '/' in the base64
		`""`, `"AQ=="`, `"AQ\u003d\u003d"`, `"A\/8="`, // escapes: encoding/json's path
		`"AQ="`, `"!!"`, `"AQ==" `, `{"a":1}`, `12`, `"`,
	} {
		var want []byte
		wantErr := json.Unmarshal([]byte(p), &want)
		got, err := decodePayload(json.RawMessage(p))
		switch {
		case wantErr != nil && !errors.Is(err, participant.ErrBadRequest):
			t.Errorf("decodePayload(%s) = %v, %v; encoding/json refuses it: %v", p, got, err, wantErr)
		case wantErr == nil && (err != nil || !bytes.Equal(got, want)):
			t.Errorf("decodePayload(%s) = %v, %v; want %v", p, got, err, want)
		}
	}
}
