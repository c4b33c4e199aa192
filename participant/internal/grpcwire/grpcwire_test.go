package grpcwire

import (
	"net/url"
	"testing"
)

// TestTargetIsTheQueryEncoding: Target is written out by hand; its bytes must stay those of the
// url.Values encoding the signatures of earlier releases cover (a rolling upgrade mixes both).
func TestTargetIsTheQueryEncoding(t *testing.T) {
	for _, tc := range [][4]string{
		{"0194f3c2-1111-7222-8333-444455556666", "s0-1", "action", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"},
		{"", "", "", ""},
		{"a b&c=d", "é/ü?#%", "try\nconfirm", "+;,"},
	} {
		gid, branch, op, nonce := tc[0], tc[1], tc[2], tc[3]
		want := "/shop.v1.Stock/Try?" + url.Values{"gid": {gid}, "branch": {branch}, "op": {op}, "nonce": {nonce}}.Encode()
		if got := Target("/shop.v1.Stock/Try", gid, branch, op, nonce); got != want {
			t.Errorf("Target(%q) = %q, want %q", tc, got, want)
		}
	}
}
