package barrier_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/barriertest"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// The secrets of the tests: coordinators sign with testSecret; a participant in a key rotation
// also accepts oldSecret.
const (
	testSecret  = barriertest.Secret
	oldSecret   = "old-secret-0123456789abcdef"
	wrongSecret = "wrong-secret-0123456789abcdef"
)

// The helpers below are the only places the security tests name the signing API, so that the
// tests also compile against the code before it (with these helpers doing what that code could).

// withSecrets returns the barrier options that make its handlers verify signatures.
func withSecrets(secrets ...string) []barrier.Option {
	return []barrier.Option{barrier.WithSecrets(secrets...)}
}

// withUnsigned returns the barrier options of the explicit opt-out of signing.
func withUnsigned() []barrier.Option {
	return []barrier.Option{barrier.WithUnsignedRequests()}
}

// handler serves fn behind bar, restricted to ops when any are given.
func handler(bar *barrier.Barrier, fn func(context.Context, pgx.Tx, participant.Request) error, ops ...participant.Op) http.Handler {
	if len(ops) == 0 {
		return bar.Handler(fn)
	}
	return bar.Handler(fn, barrier.WithAllowedOps(ops...))
}

// signingClient returns a client signing with secret on top of base.
func signingClient(t testing.TB, secret string, base *http.Client) *http.Client {
	t.Helper()
	c, err := participant.NewSigningClient(secret, base)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
