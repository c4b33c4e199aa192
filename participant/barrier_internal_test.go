package participant

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
)

func TestBarrierKey(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	// "<len(gid)>:<gid>/<branch>": with a 3-digit gid length, gid+branch may take 200-5 bytes.
	for _, tc := range []struct {
		name    string
		req     Request
		want    string
		wantErr bool
	}{
		{name: "plain", req: Request{GID: "g1", Branch: "stock", Op: OpTry}, want: "2:g1/stock"},
		{name: "separator in gid", req: Request{GID: "a/b", Branch: "c", Op: OpCancel}, want: "3:a/b/c"},
		{name: "separator in branch", req: Request{GID: "a", Branch: "b/c", Op: OpCancel}, want: "1:a/b/c"},
		{name: "digits and colon in gid", req: Request{GID: "1:a", Branch: "b", Op: OpConfirm}, want: "3:1:a/b"},
		{name: "unicode", req: Request{GID: "gé", Branch: "ß", Op: OpAction}, want: "3:gé/ß"},
		{name: "longest", req: Request{GID: long(100), Branch: long(95), Op: OpTry}, want: "100:" + long(100) + "/" + long(95)},
		{name: "one byte too long", req: Request{GID: long(100), Branch: long(96), Op: OpTry}, wantErr: true},
		{name: "empty gid", req: Request{Branch: "b", Op: OpTry}, wantErr: true},
		{name: "empty branch", req: Request{GID: "g", Op: OpTry}, wantErr: true},
		{name: "zero op", req: Request{GID: "g", Branch: "b"}, wantErr: true},
		{name: "unknown op", req: Request{GID: "g", Branch: "b", Op: 42}, wantErr: true},
		{name: "NUL in gid", req: Request{GID: "g\x00", Branch: "b", Op: OpTry}, wantErr: true},
		{name: "invalid UTF-8 in branch", req: Request{GID: "g", Branch: "\xff", Op: OpTry}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := barrierKey(tc.req)
			if tc.wantErr {
				if !errors.Is(err, ErrBadRequest) {
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
		k, err := barrierKey(Request{GID: p[0], Branch: p[1], Op: OpTry})
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
		op           Op
		origin       Op // 0: none
		compensation Op // 0: none
	}{
		{op: OpTry, compensation: OpCancel},
		{op: OpConfirm},
		{op: OpCancel, origin: OpTry},
		{op: OpAction, compensation: OpCompensate},
		{op: OpCompensate, origin: OpAction},
		{op: OpPrepare, compensation: OpAbort},
		{op: OpCommit},
		{op: OpAbort, origin: OpPrepare},
		{op: OpCanCommit},
		{op: OpPreCommit, compensation: OpAbort},
		{op: OpDoCommit},
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
		{"refused", ErrRefused, http.StatusConflict},
		{"hanging", ErrHanging, http.StatusConflict},
		{"wrapped refusal", errors.Join(errors.New("stock"), ErrRefused), http.StatusConflict},
		{"bad request", ErrBadRequest, http.StatusBadRequest},
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
		want    Request
		wantErr bool
	}{
		{name: "try", body: `{"gid":"g","branch":"b","op":"try","payload":{"n":1}}`,
			want: Request{GID: "g", Branch: "b", Op: OpTry, Payload: []byte(`{"n":1}`)}},
		{name: "unknown field ignored", body: `{"gid":"g","branch":"b","op":"cancel","x":1}`,
			want: Request{GID: "g", Branch: "b", Op: OpCancel}},
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
				if !errors.Is(err, ErrBadRequest) {
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

func TestNewBarrierOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []BarrierOption
		wantErr bool
	}{
		{name: "defaults"},
		{name: "all set", opts: []BarrierOption{WithBarrierSchema("s"), WithBarrierTable("t"), WithBarrierRetention(1e9),
			WithBarrierPurgeSchedule("@every 5s"), WithBarrierPurgeBatch(10), WithMaxRequestBytes(10), WithBarrierLogger(nil)}},
		{name: "empty table", opts: []BarrierOption{WithBarrierTable("")}, wantErr: true},
		{name: "zero retention", opts: []BarrierOption{WithBarrierRetention(0)}, wantErr: true},
		{name: "bad schedule", opts: []BarrierOption{WithBarrierPurgeSchedule("often")}, wantErr: true},
		{name: "zero batch", opts: []BarrierOption{WithBarrierPurgeBatch(0)}, wantErr: true},
		{name: "zero body", opts: []BarrierOption{WithMaxRequestBytes(0)}, wantErr: true},
		{name: "two secrets", opts: []BarrierOption{WithSecrets("0123456789abcdef", "fedcba9876543210"), WithSignatureWindow(time.Minute)}},
		{name: "unsigned", opts: []BarrierOption{WithUnsignedRequests()}},
		{name: "short secret", opts: []BarrierOption{WithSecrets("0123456789abcdef", "short")}, wantErr: true},
		{name: "empty secret list", opts: []BarrierOption{WithSecrets()}, wantErr: true},
		{name: "secrets and unsigned", opts: []BarrierOption{WithSecrets("0123456789abcdef"), WithUnsignedRequests()}, wantErr: true},
		{name: "zero window", opts: []BarrierOption{WithSignatureWindow(0)}, wantErr: true},
		{name: "window beyond retention", opts: []BarrierOption{WithSecrets("0123456789abcdef"), WithBarrierRetention(time.Minute),
			WithSignatureWindow(time.Hour)}, wantErr: true},
		// A timestamp may lie up to the window ahead, so a replay stays possible until receipt +
		// 2 × window: the nonces must outlive that.
		{name: "twice the window equals the retention", opts: []BarrierOption{WithSecrets("0123456789abcdef"),
			WithBarrierRetention(time.Minute), WithSignatureWindow(30 * time.Second)}, wantErr: true},
		{name: "twice the window just above the retention", opts: []BarrierOption{WithSecrets("0123456789abcdef"),
			WithBarrierRetention(time.Minute), WithSignatureWindow(40 * time.Second)}, wantErr: true},
		{name: "twice the window below the retention", opts: []BarrierOption{WithSecrets("0123456789abcdef"),
			WithBarrierRetention(time.Minute), WithSignatureWindow(29 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBarrier(&pgxpool.Pool{}, tc.opts...)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidOption) {
					t.Fatalf("NewBarrier = %v, %v; want an error wrapping ErrInvalidOption", b, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewBarrier: %v", err)
			}
		})
	}
}
