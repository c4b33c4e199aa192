package core

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// maxHeaderBytes bounds the headers a branch records (names and values).
const maxHeaderBytes = 4 << 10

// WithTimeout returns t bounded by d per call (0: the coordinator's call timeout), or an error
// wrapping [ErrInvalidBranch] for a negative d or one under a millisecond (stored in ms).
func (t Target) WithTimeout(d time.Duration) (Target, error) {
	if d < 0 || d > 0 && d < time.Millisecond {
		return t, fmt.Errorf("timeout %v: negative or under a millisecond: %w", d, ErrInvalidBranch)
	}
	t.Timeout = d
	return t, nil
}

// CheckHeader returns an error naming the first header a branch may not record: the log stores
// headers in clear, so a name that carries credentials (Authorization, Proxy-Authorization,
// Cookie, or one holding "auth", "token", "secret", "password", "key", "session", "signature",
// "credential"; [SensitiveHeader]) is refused, as are the headers the wire protocol sets itself
// (Content-Type, Content-Length, Host, the trace and signing headers), names or values
// net/http would not send, and more than 4 KiB in all.
func CheckHeader(h http.Header) error {
	n := 0
	for k, vs := range h {
		ck := http.CanonicalHeaderKey(k)
		switch {
		case !validName(k):
			return fmt.Errorf("header %q: not a valid name", k)
		case SensitiveHeader(k):
			return fmt.Errorf("header %s: may hold a credential, which the log would store in clear: give it to the client (coordinator.WithHTTPClient)", ck)
		case ck == "Content-Type" || ck == "Content-Length" || ck == "Host" || ck == "Traceparent" || ck == "Tracestate" ||
			ck == "Transfer-Encoding" || ck == "Connection" || strings.HasPrefix(ck, "X-Txkit-"):
			return fmt.Errorf("header %s: set by the wire protocol", ck)
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n\x00") {
				return fmt.Errorf("header %s: value holds a line break or NUL", ck)
			}
			n += len(k) + len(v)
		}
	}
	if n > maxHeaderBytes {
		return fmt.Errorf("headers of %d bytes, more than %d", n, maxHeaderBytes)
	}
	return nil
}

// SensitiveHeader reports whether a header called name may carry a credential: the coordinator
// refuses to record it, and the admin API redacts its value.
func SensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie", "set-cookie":
		return true
	case "idempotency-key": // a request's key, no credential
		return false
	}
	for _, s := range []string{"auth", "token", "secret", "passw", "key", "session", "signature", "credential", "cookie"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// validName reports whether s is an HTTP token (RFC 9110 field name).
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r >= 0x7f || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// callOptions is the JSON of a target's call_options column.
type callOptions struct {
	TimeoutMS int64       `json:"timeout_ms,omitempty"`
	Header    http.Header `json:"header,omitempty"`
}

// encodeCallOptions returns t's call_options, nil (NULL) when it has none.
func encodeCallOptions(t Target) *string {
	if t.Timeout <= 0 && len(t.Header) == 0 {
		return nil
	}
	b, err := json.Marshal(callOptions{TimeoutMS: t.Timeout.Milliseconds(), Header: t.Header})
	if err != nil { // an http.Header always encodes
		return nil
	}
	s := string(b)
	return &s
}

// decodeCallOptions sets t's Header and Timeout from a call_options column (nil: none).
func decodeCallOptions(t *Target, s *string) error {
	if s == nil {
		return nil
	}
	var o callOptions
	if err := json.Unmarshal([]byte(*s), &o); err != nil {
		return fmt.Errorf("call options %q: %w", *s, err)
	}
	t.Timeout, t.Header = time.Duration(o.TimeoutMS)*time.Millisecond, o.Header
	return nil
}
