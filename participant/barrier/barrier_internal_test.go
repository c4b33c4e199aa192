package barrier

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/participant"
)

func TestBarrierKey(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	// "<len(gid)>:<gid>/<branch>": with a 3-digit gid length, gid+branch may take 200-5 bytes.
	for _, tc := range []struct {
		name    string
		req     participant.Request
		want    string
		wantErr bool
	}{
		{name: "plain", req: participant.Request{GID: "g1", Branch: "stock", Op: participant.OpTry}, want: "2:g1/stock"},
		{name: "separator in gid", req: participant.Request{GID: "a/b", Branch: "c", Op: participant.OpCancel}, want: "3:a/b/c"},
		{name: "separator in branch", req: participant.Request{GID: "a", Branch: "b/c", Op: participant.OpCancel}, want: "1:a/b/c"},
		{name: "digits and colon in gid", req: participant.Request{GID: "1:a", Branch: "b", Op: participant.OpConfirm}, want: "3:1:a/b"},
		{name: "unicode", req: participant.Request{GID: "gé", Branch: "ß", Op: participant.OpAction}, want: "3:gé/ß"},
		{name: "longest", req: participant.Request{GID: long(100), Branch: long(95), Op: participant.OpTry}, want: "100:" + long(100) + "/" + long(95)},
		{name: "one byte too long", req: participant.Request{GID: long(100), Branch: long(96), Op: participant.OpTry}, wantErr: true},
		{name: "empty gid", req: participant.Request{Branch: "b", Op: participant.OpTry}, wantErr: true},
		{name: "empty branch", req: participant.Request{GID: "g", Op: participant.OpTry}, wantErr: true},
		{name: "zero op", req: participant.Request{GID: "g", Branch: "b"}, wantErr: true},
		{name: "unknown op", req: participant.Request{GID: "g", Branch: "b", Op: 42}, wantErr: true},
		{name: "NUL in gid", req: participant.Request{GID: "g\x00", Branch: "b", Op: participant.OpTry}, wantErr: true},
		{name: "invalid UTF-8 in branch", req: participant.Request{GID: "g", Branch: "\xff", Op: participant.OpTry}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := barrierKey(tc.req)
			if tc.wantErr {
				if !errors.Is(err, participant.ErrBadRequest) {
					t.Fatalf("barrierKey(%+v) = %q, %v; want an error wrapping ErrBadRequest", tc.req, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("barrierKey(%+v) = %q, %v; want %q", tc.req, got, err, tc.want)
			}
			if len(got) > idempotency.MaxKeyLen {
				t.Fatalf("key of %d bytes, more than %d", len(got), idempotency.MaxKeyLen)
			}
		})
	}
}

// Pairs that would collide under a plain separator must give different keys.
func TestBarrierKeyInjective(t *testing.T) {
	pairs := [][2]string{
		{"a/b", "c"}, {"a", "b/c"}, {"a/", "b"}, {"a", "/b"}, {"1:a", "b"}, {"1", ":a/b"},
		{"ab", "c"}, {"a", "bc"}, {"10:aaaaaaaaaa", "x"}, {"1", "0:aaaaaaaaaa/x"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k, err := barrierKey(participant.Request{GID: p[0], Branch: p[1], Op: participant.OpTry})
		if err != nil {
			t.Fatalf("barrierKey(%q, %q): %v", p[0], p[1], err)
		}
		if q, dup := seen[k]; dup {
			t.Fatalf("(%q, %q) and (%q, %q) share key %q", p[0], p[1], q[0], q[1], k)
		}
		seen[k] = p
	}
}

func TestOpPairing(t *testing.T) {
	for _, tc := range []struct {
		op           participant.Op
		origin       participant.Op // 0: none
		compensation participant.Op // 0: none
	}{
		{op: participant.OpTry, compensation: participant.OpCancel},
		{op: participant.OpConfirm},
		{op: participant.OpCancel, origin: participant.OpTry},
		{op: participant.OpAction, compensation: participant.OpCompensate},
		{op: participant.OpCompensate, origin: participant.OpAction},
		{op: participant.OpPrepare, compensation: participant.OpAbort},
		{op: participant.OpCommit},
		{op: participant.OpAbort, origin: participant.OpPrepare},
		{op: participant.OpCanCommit},
		{op: participant.OpPreCommit, compensation: participant.OpAbort},
		{op: participant.OpDoCommit},
	} {
		t.Run(tc.op.String(), func(t *testing.T) {
			o, ok := originOf(tc.op)
			if ok != (tc.origin != 0) || o != tc.origin {
				t.Errorf("originOf(%s) = %s, %v; want %s", tc.op, o, ok, tc.origin)
			}
			c, ok := compensationOf(tc.op)
			if ok != (tc.compensation != 0) || c != tc.compensation {
				t.Errorf("compensationOf(%s) = %s, %v; want %s", tc.op, c, ok, tc.compensation)
			}
			if ok {
				if back, _ := originOf(c); back != markerOf(tc.op) { // precommit is marked as prepare
					t.Errorf("originOf(compensationOf(%s)) = %s", tc.op, back)
				}
			}
		})
	}
}

func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"refused", participant.ErrRefused, http.StatusConflict},
		{"hanging", ErrHanging, http.StatusConflict},
		{"wrapped refusal", errors.Join(errors.New("stock"), participant.ErrRefused), http.StatusConflict},
		{"bad request", participant.ErrBadRequest, http.StatusBadRequest},
		{"other", errors.New("db down"), http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusOf(tc.err); got != tc.want {
				t.Errorf("statusOf(%v) = %d; want %d", tc.err, got, tc.want)
			}
		})
	}
}

func TestDecodeRequest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		want    participant.Request
		wantErr bool
	}{
		{name: "try", body: `{"gid":"g","branch":"b","op":"try","payload":{"n":1}}`,
			want: participant.Request{GID: "g", Branch: "b", Op: participant.OpTry, Payload: []byte(`{"n":1}`)}},
		{name: "unknown field ignored", body: `{"gid":"g","branch":"b","op":"cancel","x":1}`,
			want: participant.Request{GID: "g", Branch: "b", Op: participant.OpCancel}},
		{name: "malformed", body: `{"gid":`, wantErr: true},
		{name: "empty body", body: ``, wantErr: true},
		{name: "unknown op", body: `{"gid":"g","branch":"b","op":"explode"}`, wantErr: true},
		{name: "no op", body: `{"gid":"g","branch":"b"}`, wantErr: true},
		{name: "no gid", body: `{"branch":"b","op":"try"}`, wantErr: true},
		{name: "two objects", body: `{"gid":"g","branch":"b","op":"try"}{}`, wantErr: true},
		{name: "op as number", body: `{"gid":"g","branch":"b","op":1}`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRequest(strings.NewReader(tc.body))
			if tc.wantErr {
				if !errors.Is(err, participant.ErrBadRequest) {
					t.Fatalf("decodeRequest(%s) = %+v, %v; want an error wrapping ErrBadRequest", tc.body, got, err)
				}
				return
			}
			if err != nil || got.GID != tc.want.GID || got.Branch != tc.want.Branch || got.Op != tc.want.Op ||
				string(got.Payload) != string(tc.want.Payload) {
				t.Fatalf("decodeRequest(%s) = %+v, %v; want %+v", tc.body, got, err, tc.want)
			}
		})
	}
}

func TestNewOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []Option
		wantErr bool
	}{
		{name: "defaults"},
		{name: "all set", opts: []Option{WithTable("s", "t"), WithRetention(1e9, "@every 5s"), MaxRequestBytesForTest(10), WithLogger(nil)}},
		{name: "zero retention", opts: []Option{WithRetention(0, "@every 1m")}, wantErr: true},
		{name: "bad schedule", opts: []Option{WithRetention(DefaultRetention, "often")}, wantErr: true},
		{name: "zero body", opts: []Option{MaxRequestBytesForTest(0)}, wantErr: true},
		{name: "two secrets", opts: []Option{WithSecrets("0123456789abcdef", "fedcba9876543210"), SignatureWindowForTest(time.Minute)}},
		{name: "unsigned", opts: []Option{WithUnsignedRequests()}},
		{name: "short secret", opts: []Option{WithSecrets("0123456789abcdef", "short")}, wantErr: true},
		{name: "empty secret list", opts: []Option{WithSecrets()}, wantErr: true},
		{name: "secrets and unsigned", opts: []Option{WithSecrets("0123456789abcdef"), WithUnsignedRequests()}, wantErr: true},
		{name: "zero window", opts: []Option{SignatureWindowForTest(0)}, wantErr: true},
		{name: "window beyond retention", opts: []Option{WithSecrets("0123456789abcdef"), WithRetention(time.Minute, "@every 1m"),
			SignatureWindowForTest(time.Hour)}, wantErr: true},
		// A timestamp may lie up to the window ahead, so a replay stays possible until receipt +
		// 2 × window: the nonces must outlive that.
		{name: "twice the window equals the retention", opts: []Option{WithSecrets("0123456789abcdef"),
			WithRetention(time.Minute, "@every 1m"), SignatureWindowForTest(30 * time.Second)}, wantErr: true},
		{name: "twice the window just above the retention", opts: []Option{WithSecrets("0123456789abcdef"),
			WithRetention(time.Minute, "@every 1m"), SignatureWindowForTest(40 * time.Second)}, wantErr: true},
		{name: "twice the window below the retention", opts: []Option{WithSecrets("0123456789abcdef"),
			WithRetention(time.Minute, "@every 1m"), SignatureWindowForTest(29 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(&pgxpool.Pool{}, tc.opts...)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidOption) {
					t.Fatalf("New = %v, %v; want an error wrapping ErrInvalidOption", b, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
		})
	}
}
