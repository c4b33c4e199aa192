package notify

import (
	"fmt"
	"net/http"
	"time"

	"github.com/txkit/txkit/internal/signing"
)

// The headers of a signed request, a delivery or a query.
const (
	HeaderID        = "X-Txkit-Notification-Id" // the notification id (deliveries)
	HeaderReceiver  = "X-Txkit-Receiver"        // the receiver's name
	HeaderTimestamp = signing.HeaderTimestamp   // Unix seconds when the request was signed
	HeaderSignature = signing.HeaderSignature   // "v1=" + hex HMAC-SHA256
)

// Sign returns the signature of a request: "v1=" followed by the hex HMAC-SHA256, keyed by secret,
// of the timestamp (Unix seconds), the method, the path with its query, and the body, joined by
// newlines. Binding the timestamp and the target into the signature is what lets a receiver
// refuse a stale or re-targeted request.
func Sign(secret string, ts int64, method, target string, body []byte) string {
	return signing.Sign(secret, ts, method, target, body)
}

// signRequest sets the timestamp and signature headers of r (whose body is body).
func signRequest(r *http.Request, secret string, now time.Time, body []byte) {
	signing.SignRequest(r, secret, now, body)
}

// verify checks r's signature against any of secrets (two during a key rotation) and its
// timestamp against now ± window. It returns an error wrapping ErrUnauthorized saying which check
// failed.
func verify(r *http.Request, body []byte, secrets []string, now time.Time, window time.Duration) error {
	if err := signing.VerifyRequest(r, body, secrets, now, window); err != nil {
		return fmt.Errorf("notify: %w: %w", ErrUnauthorized, err)
	}
	return nil
}
