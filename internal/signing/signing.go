// Package signing holds the HMAC-SHA256 request and response signatures that txkit's HTTP parts
// share: notify's deliveries and query API, and the participant wire protocol between
// coordinators and participants.
//
// A request's signature covers the timestamp (Unix seconds), the method, the target (path and
// query), its Idempotency-Key header when it carries one, and the body; a response's covers the timestamp, the status and the request it answers
// (method and target) and the body, under a different domain, so neither can be passed off as the
// other. A verifier checks the signature against any of its secrets (two during a key rotation)
// and the timestamp against a window around its own clock. Replay refusal within the window is
// the caller's: it claims the signature as a nonce where it records its effect.
//
// Everything here is safe for concurrent use: there is no state.
package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a signed request or response.
const (
	HeaderTimestamp = "X-Txkit-Timestamp" // Unix seconds when the message was signed
	HeaderSignature = "X-Txkit-Signature" // "v1=" + hex HMAC-SHA256
	// HeaderIdempotencyKey is the request header that a signature covers when it is present
	// ([SignKeyed]), so that the key cannot be added, dropped or changed without the secret.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// MinSecretLen is the shortest secret [CheckSecrets] accepts, in bytes.
const MinSecretLen = 16

// ErrUnauthorized is wrapped by every verification failure; callers wrap it in turn with their
// own sentinel.
var ErrUnauthorized = errors.New("signature refused")

// Sign returns the signature of a request: "v1=" followed by the hex HMAC-SHA256, keyed by secret,
// of the timestamp, the method, the target (path with its query) and the body, joined by
// newlines. Binding the timestamp and the target is what lets a verifier refuse a stale or
// re-targeted request.
func Sign(secret string, ts int64, method, target string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d\n%s\n%s\n", ts, method, target)
	return sum(m, body)
}

// SignKeyed returns the signature of a request that carries the idempotency key key: as [Sign],
// with the key on a line of its own after the target, under the domain line "keyed", so that a
// keyed and an unkeyed signature never verify as each other.
func SignKeyed(secret string, ts int64, method, target, key string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "keyed\n%d\n%s\n%s\n%s\n", ts, method, target, key)
	return sum(m, body)
}

// signRequest is the signature of r, with r's Idempotency-Key bound in when it has one.
func signRequest(r *http.Request, secret string, ts int64, body []byte) string {
	if key := r.Header.Get(HeaderIdempotencyKey); key != "" {
		return SignKeyed(secret, ts, r.Method, r.URL.RequestURI(), key, body)
	}
	return Sign(secret, ts, r.Method, r.URL.RequestURI(), body)
}

// SignResponse returns the signature of a response with status and body to the request method
// target, signed at ts. The domain line ("response") keeps it from verifying as a request.
func SignResponse(secret string, ts int64, status int, method, target string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "response\n%d\n%d\n%s\n%s\n", ts, status, method, target)
	return sum(m, body)
}

func sum(m hash.Hash, body []byte) string {
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// SignRequest sets r's timestamp and signature headers for body, r's body, signed at now. When r
// carries an Idempotency-Key header the signature covers it ([SignKeyed]): set the key first.
func SignRequest(r *http.Request, secret string, now time.Time, body []byte) {
	ts := now.Unix()
	r.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	r.Header.Set(HeaderSignature, signRequest(r, secret, ts, body))
}

// SetResponseHeaders sets the timestamp and signature headers in h, the header of the answer to r
// with status and body, signed at now. Call it before WriteHeader.
func SetResponseHeaders(h http.Header, r *http.Request, secret string, now time.Time, status int, body []byte) {
	ts := now.Unix()
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, SignResponse(secret, ts, status, r.Method, r.URL.RequestURI(), body))
}

// VerifyRequest checks r's signature over body (and over r's Idempotency-Key, when it carries
// one) against any of secrets and its timestamp against now ± window. It returns nil or an error
// wrapping [ErrUnauthorized] that says which check failed.
func VerifyRequest(r *http.Request, body []byte, secrets []string, now time.Time, window time.Duration) error {
	if strings.ContainsAny(r.Header.Get(HeaderIdempotencyKey), "\r\n") {
		return fmt.Errorf("%s holds a line break: %w", HeaderIdempotencyKey, ErrUnauthorized)
	}
	return check(r.Header, secrets, now, window, func(secret string, ts int64) string {
		return signRequest(r, secret, ts, body)
	})
}

// VerifyResponse checks the signature of resp (an answer to resp.Request) over body against any
// of secrets and its timestamp against now ± window. It returns nil or an error wrapping
// [ErrUnauthorized].
func VerifyResponse(resp *http.Response, body []byte, secrets []string, now time.Time, window time.Duration) error {
	if resp.Request == nil || resp.Request.URL == nil {
		return fmt.Errorf("response without its request: %w", ErrUnauthorized)
	}
	method, target := resp.Request.Method, resp.Request.URL.RequestURI()
	return check(resp.Header, secrets, now, window, func(secret string, ts int64) string {
		return SignResponse(secret, ts, resp.StatusCode, method, target, body)
	})
}

func check(h http.Header, secrets []string, now time.Time, window time.Duration, sign func(secret string, ts int64) string) error {
	ts, err := strconv.ParseInt(h.Get(HeaderTimestamp), 10, 64)
	if err != nil {
		return fmt.Errorf("bad or missing %s: %w", HeaderTimestamp, ErrUnauthorized)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > window || d < -window {
		return fmt.Errorf("timestamp %d is %v away from now, outside ±%v: %w", ts, d.Round(time.Second), window, ErrUnauthorized)
	}
	got := h.Get(HeaderSignature)
	if !strings.HasPrefix(got, "v1=") {
		return fmt.Errorf("bad or missing %s: %w", HeaderSignature, ErrUnauthorized)
	}
	for _, s := range secrets {
		if hmac.Equal([]byte(got), []byte(sign(s, ts))) {
			return nil
		}
	}
	return fmt.Errorf("signature does not verify: %w", ErrUnauthorized)
}

// CheckSecrets returns an error when secrets is empty or holds a secret shorter than
// [MinSecretLen] bytes.
func CheckSecrets(secrets []string) error {
	if len(secrets) == 0 {
		return errors.New("no secret")
	}
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return fmt.Errorf("secret %d is %d bytes, shorter than %d", i+1, len(s), MinSecretLen)
		}
	}
	return nil
}

// Verify checks sig, a signature made by [Sign] at the Unix time ts (decimal) over method, target
// and body — a message that did not come as an HTTP request, such as a gRPC call whose metadata
// carries ts and sig — against any of secrets, and ts against now ± window. It returns nil or an
// error wrapping [ErrUnauthorized] that says which check failed.
func Verify(ts, sig string, secrets []string, now time.Time, window time.Duration, method, target string, body []byte) error {
	h := http.Header{}
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderSignature, sig)
	return check(h, secrets, now, window, func(secret string, ts int64) string {
		return Sign(secret, ts, method, target, body)
	})
}
