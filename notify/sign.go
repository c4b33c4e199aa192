package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a signed request, a delivery or a query.
const (
	HeaderID        = "X-Txkit-Notification-Id" // the notification id (deliveries)
	HeaderReceiver  = "X-Txkit-Receiver"        // the receiver's name
	HeaderTimestamp = "X-Txkit-Timestamp"       // Unix seconds when the request was signed
	HeaderSignature = "X-Txkit-Signature"       // "v1=" + hex HMAC-SHA256
)

// Sign returns the signature of a request: "v1=" followed by the hex HMAC-SHA256, keyed by secret,
// of the timestamp (Unix seconds), the method, the path with its query, and the body, joined by
// newlines. Binding the timestamp and the target into the signature is what lets a receiver
// refuse a stale or re-targeted request.
func Sign(secret string, ts int64, method, target string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d\n%s\n%s\n", ts, method, target)
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// signRequest sets the timestamp and signature headers of r (whose body is body).
func signRequest(r *http.Request, secret string, now time.Time, body []byte) {
	ts := now.Unix()
	r.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	r.Header.Set(HeaderSignature, Sign(secret, ts, r.Method, r.URL.RequestURI(), body))
}

// verify checks r's signature against any of secrets (two during a key rotation) and its
// timestamp against now ± window. It returns an error wrapping ErrUnauthorized saying which check
// failed.
func verify(r *http.Request, body []byte, secrets []string, now time.Time, window time.Duration) error {
	ts, err := strconv.ParseInt(r.Header.Get(HeaderTimestamp), 10, 64)
	if err != nil {
		return fmt.Errorf("notify: bad or missing %s: %w", HeaderTimestamp, ErrUnauthorized)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > window || d < -window {
		return fmt.Errorf("notify: timestamp %d is %v away from now, outside ±%v: %w", ts, d.Round(time.Second), window, ErrUnauthorized)
	}
	got := r.Header.Get(HeaderSignature)
	if !strings.HasPrefix(got, "v1=") {
		return fmt.Errorf("notify: bad or missing %s: %w", HeaderSignature, ErrUnauthorized)
	}
	for _, s := range secrets {
		if hmac.Equal([]byte(got), []byte(Sign(s, ts, r.Method, r.URL.RequestURI(), body))) {
			return nil
		}
	}
	return fmt.Errorf("notify: signature does not verify: %w", ErrUnauthorized)
}
