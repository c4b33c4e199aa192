package admin

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/txkit/txkit/internal/signing"
)

// ReadOnly reports whether the Admin has no credentials configured ([WithTokens],
// [WithHMACSecrets]): then every mutating API call is refused with 401.
func (a *Admin) ReadOnly() bool { return len(a.o.tokens) == 0 && len(a.o.hmac) == 0 }

// authenticate returns the actor r's credentials name: its bearer token's, or the one whose secret
// signed it. Anything else is an error wrapping ErrUnauthorized.
func (a *Admin) authenticate(r *http.Request, body []byte) (string, error) {
	if a.ReadOnly() {
		return "", fmt.Errorf("admin: read-only: no token or HMAC secret is configured: %w", ErrUnauthorized)
	}
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return "", fmt.Errorf("admin: Authorization: want \"Bearer <token>\": %w", ErrUnauthorized)
		}
		actor, act := a.tokenActor(tok)
		if actor == "" {
			return "", fmt.Errorf("admin: bearer token not accepted: %w", ErrUnauthorized)
		}
		if !act {
			return "", fmt.Errorf("admin: the token of %s may only read: %w", actor, ErrUnauthorized)
		}
		return actor, nil
	}
	if r.Header.Get(signing.HeaderSignature) != "" {
		actors := make([]string, 0, len(a.o.hmac))
		for actor := range a.o.hmac {
			actors = append(actors, actor)
		}
		sort.Strings(actors)
		var last error
		for _, actor := range actors {
			err := signing.VerifyRequest(r, body, a.o.hmac[actor], a.o.now(), a.o.hmacWindow)
			if err == nil {
				return actor, nil
			}
			last = err
		}
		if last == nil {
			return "", fmt.Errorf("admin: signed request, but no HMAC secret is configured: %w", ErrUnauthorized)
		}
		return "", fmt.Errorf("admin: %w: %w", last, ErrUnauthorized)
	}
	return "", fmt.Errorf("admin: no credentials: send \"Authorization: Bearer <token>\" or a signed request: %w", ErrUnauthorized)
}

// readAll reads r's (bounded) body.
func readAll(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	return io.ReadAll(r.Body)
}
