package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/txkit/txkit/internal/signing"
)

// SessionCookie is the name of the cookie [Admin.Login] makes: the web console's session.
const SessionCookie = "txkit_admin_session"

// sessionTTL is how long a session cookie is accepted after [Admin.Login] made it.
const sessionTTL = 12 * time.Hour

// AllowedHost reports whether host (a request's Host header, with or without a port) names this
// server: localhost or a name under .localhost, a loopback address, or a name or address given to
// [WithAllowedHosts]. [Admin.Handler] and the console answer any other Host 421, so that a web page
// cannot read them through a DNS name rebound to this server's address. It does not block.
func (a *Admin) AllowedHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	switch {
	case host == "":
		return false
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return true
	case a.o.hosts[host]:
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReadActor returns the actor whose credential r carries, for a read: "Authorization: Bearer"
// with a token of [WithTokens], an HMAC signature ([WithHMACSecrets]), or the
// session cookie of [Admin.Login]. Anything else returns an error wrapping [ErrUnauthorized]. It
// does not block.
func (a *Admin) ReadActor(r *http.Request) (string, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return "", fmt.Errorf("admin: Authorization: want \"Bearer <token>\": %w", ErrUnauthorized)
		}
		if actor, _ := a.tokenActor(tok); actor != "" {
			return actor, nil
		}
		return "", fmt.Errorf("admin: bearer token not accepted: %w", ErrUnauthorized)
	}
	if r.Header.Get(signing.HeaderSignature) != "" {
		return a.authenticate(r, nil) // a read has no body
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return a.sessionActor(c.Value)
	}
	return "", fmt.Errorf("admin: no credentials: send \"Authorization: Bearer <token>\": %w", ErrUnauthorized)
}

// Login returns a session cookie for the actor of token (one of [WithTokens]): [Admin.ReadActor] accepts it for reads, for 12 hours or until the token is
// no longer configured; it never authorizes a mutation or a reveal. The cookie is HttpOnly,
// SameSite=Strict, for path "/"; the caller sets Secure when it serves TLS. A token not accepted
// returns an error wrapping [ErrUnauthorized]. It does not block.
func (a *Admin) Login(token string) (*http.Cookie, string, error) {
	actor, _ := a.tokenActor(token)
	if actor == "" {
		return nil, "", fmt.Errorf("admin: token not accepted: %w", ErrUnauthorized)
	}
	exp := a.o.now().Add(sessionTTL).Unix()
	return &http.Cookie{Name: SessionCookie, Value: a.session(actor, token, exp), Path: "/", MaxAge: int(sessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode}, actor, nil
}

// tokenActor returns the actor of the bearer token tok, and whether it may act (a token of
// WithTokens) or only read; "" when no actor has it. Every token is compared, in constant time,
// so the time taken does not say which one came closest.
func (a *Admin) tokenActor(tok string) (actor string, act bool) {
	for name, t := range a.o.tokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
			actor, act = name, true
		}
	}
	for name, t := range a.o.readTokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
			actor, act = name, false
		}
	}
	return actor, act
}

// A session is "actor.expiry.mac": the actor's name (base64url), the expiry (Unix seconds) and an
// HMAC-SHA256 of both keyed with the actor's token. It needs no state on the server, holds for
// every replica given the same tokens, and ends when the token is taken away or changed; it is
// not the token, so a cookie sent to another service on the same host does not give that service
// the token.
func (a *Admin) session(actor, token string, exp int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(actor)) + "." + strconv.FormatInt(exp, 10) + "." +
		base64.RawURLEncoding.EncodeToString(sessionMAC(token, actor, exp))
}

func sessionMAC(token, actor string, exp int64) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("txkit admin session\x00" + actor + "\x00" + strconv.FormatInt(exp, 10)))
	return m.Sum(nil)
}

// sessionActor returns the actor of a session value that verifies and has not expired.
func (a *Admin) sessionActor(v string) (string, error) {
	bad := fmt.Errorf("admin: session not accepted (expired, or its token changed): sign in again: %w", ErrUnauthorized)
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return "", bad
	}
	name, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	mac, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || a.o.now().Unix() >= exp {
		return "", bad
	}
	actor := string(name)
	token, ok := a.o.tokens[actor]
	if !ok {
		token, ok = a.o.readTokens[actor]
	}
	if !ok || !hmac.Equal(mac, sessionMAC(token, actor, exp)) {
		return "", bad
	}
	return actor, nil
}

// guard answers a request whose Host is not allowed 421, and a read (any method but POST, whose
// handlers authenticate and audit) without a read credential 401; it passes the rest to h.
func (a *Admin) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.AllowedHost(r.Host) {
			writeJSON(w, http.StatusMisdirectedRequest, map[string]string{"error": "misdirected request: this server does not answer that host name"})
			return
		}
		if r.Method != http.MethodPost {
			if _, err := a.ReadActor(r); err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="txkit admin"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": message(err)})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
