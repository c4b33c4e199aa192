package participant

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/txkit/txkit/internal/signing"
)

// The headers of a signed request: the Unix time it was signed at, and "v1=" followed by the hex
// HMAC-SHA256 of the timestamp, the method, the target (path and query) and the body, each on a
// line of its own. Notifications of package notify are signed the same way.
const (
	HeaderTimestamp = signing.HeaderTimestamp
	HeaderSignature = signing.HeaderSignature
)

// NewSigningClient returns an HTTP client that signs every request with secret (HMAC-SHA256 over
// the timestamp, method, target and body, and the Idempotency-Key header when the request carries
// one, in [HeaderTimestamp] and [HeaderSignature]) for a barrier handler given secrets (package
// participant/barrier), and that never follows a redirect: a 3xx is
// returned as the answer (a failure the coordinator retries) instead of re-posting the signed
// body to wherever the Location points.
//
// Give it to the coordinator (coordinator.WithHTTPClient): every call of a branch whose
// participant.HTTP has no Client goes through it, the first op as well as the recovery's. base, which may be nil, supplies the timeout and the transport (TLS settings, a proxy); it is copied, not changed.
// During a key rotation, participants accept both keys first, then coordinators sign with the new
// one.
//
// A secret shorter than 16 bytes returns an error wrapping [ErrInvalidOption]. The client is
// safe for concurrent use by multiple goroutines.
func NewSigningClient(secret string, base *http.Client) (*http.Client, error) {
	if err := signing.CheckSecrets([]string{secret}); err != nil {
		return nil, fmt.Errorf("participant: signing client: %w: %w", err, ErrInvalidOption)
	}
	c := noRedirectClient(base)
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c.Transport = signer{secret: secret, next: rt}
	return c, nil
}

// noRedirectClient returns a copy of base (nil: a zero client) that does not follow redirects.
func noRedirectClient(base *http.Client) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// signer is the RoundTripper of [NewSigningClient].
type signer struct {
	secret string
	next   http.RoundTripper
}

// RoundTrip signs a copy of r over its body and sends it.
func (s signer) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("participant: signing: read the body: %w", err)
		}
		body = b
	}
	sr := r.Clone(r.Context())
	sr.Body = io.NopCloser(bytes.NewReader(body))
	sr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	sr.ContentLength = int64(len(body))
	signing.SignRequest(sr, s.secret, time.Now(), body)
	return s.next.RoundTrip(sr)
}
