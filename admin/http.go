package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/httpsafe"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/signing"
)

// answerBody is the JSON body of the answer to c ending with err.
func (a *Admin) answerBody(c call, err error) []byte {
	var v any
	switch result, status := outcome(err); {
	case err == nil:
		v = map[string]any{"result": ResultOK, "action": c.action, "target": c.target}
	case status == http.StatusInternalServerError:
		id := httpsafe.Log(a.o.log, "admin: "+c.action+" failed", err, "target", c.target, "actor", c.actor)
		v = map[string]string{"error": "internal error (request id " + id + ")", "result": result}
	default:
		v = map[string]string{"error": message(err), "result": result}
	}
	b, _ := json.Marshal(v)
	return b
}

// message is err's text for an operator: without the "admin: " prefixes (the one in front and
// the sentinel's at the end, "...: admin: not found" reads "...: not found").
func message(err error) string {
	return strings.ReplaceAll(err.Error(), "admin: ", "")
}

// maxRequestBody bounds what a mutating request's body may hold (they carry none).
const maxRequestBody = 4 << 10

// Handler returns the JSON API, every route under /api/ (mount it at the server's root or beside
// other handlers on a mux); the routes and their answers: docs/console.md ("Endpoints").
//
// Errors are {"error": "..."} with 400 (a bad filter or id, saying what is wrong), 401 (no valid
// credentials), 404, 405, 409 (the row is not in a state the action applies to), 421 (a Host not
// allowed, [Admin.AllowedHost]), 429 (too many POSTs from the address) or 500 (naming a request
// id, never the internal error, which is logged with that id). GETs need a read credential
// ([Admin.ReadActor]), change nothing, and show payloads, bodies and header values redacted
// ([Secret]). POSTs, reveals included, are rate-limited per address ([WithRateLimit]), need a
// bearer token ([WithTokens]) or an HMAC signature ([WithHMACSecrets], claimed as a nonce), and are
// recorded in the audit table when their actor is known (counted by [WithMetrics] otherwise);
// an "Idempotency-Key" header makes a repeat answer what the first call answered.
//
// The handler is safe for concurrent use.
func (a *Admin) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/overview", a.get(func(r *http.Request) (any, error) { return a.Overview(r.Context()) }))
	mux.HandleFunc("GET /api/transactions", a.get(func(r *http.Request) (any, error) {
		f, err := parseTxFilter(r)
		if err != nil {
			return nil, err
		}
		return a.Transactions(r.Context(), f)
	}))
	mux.HandleFunc("GET /api/transactions/{gid}", a.get(func(r *http.Request) (any, error) {
		return a.Transaction(r.Context(), r.PathValue("gid"))
	}))
	mux.HandleFunc("GET /api/outbox", a.get(func(r *http.Request) (any, error) { return a.Outbox(r.Context()) }))
	mux.HandleFunc("GET /api/outbox/dead", a.get(func(r *http.Request) (any, error) {
		limit, err := queryLimit(r)
		if err != nil {
			return nil, err
		}
		var after uuid.UUID
		if s := r.URL.Query().Get("after"); s != "" {
			if after, err = parseID("after", s); err != nil {
				return nil, err
			}
		}
		return a.DeadMessages(r.Context(), limit, after)
	}))
	mux.HandleFunc("GET /api/notifications/failed", a.get(func(r *http.Request) (any, error) {
		limit, err := queryLimit(r)
		if err != nil {
			return nil, err
		}
		return a.FailedNotifications(r.Context(), limit)
	}))
	mux.HandleFunc("GET /api/notifications/{id}", a.get(func(r *http.Request) (any, error) {
		id, err := parseID("notification id", r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		return a.Notification(r.Context(), id)
	}))
	mux.HandleFunc("GET /api/leaders", a.get(func(r *http.Request) (any, error) { return a.Leaders(r.Context()) }))
	mux.HandleFunc("GET /api/locks", a.get(func(r *http.Request) (any, error) { return a.Locks(r.Context()) }))
	mux.HandleFunc("GET /api/audit", a.get(func(r *http.Request) (any, error) {
		limit, err := queryLimit(r)
		if err != nil {
			return nil, err
		}
		return a.Audit(r.Context(), limit)
	}))
	mux.HandleFunc("POST /api/outbox/dead/{id}/requeue", a.post(ActionRequeue, "message id", a.requeue))
	mux.HandleFunc("POST /api/notifications/{id}/redeliver", a.post(ActionRedeliver, "notification id", a.redeliver))
	mux.HandleFunc("POST /api/transactions/{gid}/resume", a.postGID(ActionResume, a.resume))
	mux.HandleFunc("POST /api/transactions/{gid}/reveal", a.revealRoute(ActionRevealTx, "gid", func(ctx context.Context, c call) (any, answer, error) {
		return a.revealTx(ctx, c)
	}))
	mux.HandleFunc("POST /api/outbox/{id}/reveal", a.revealRoute(ActionRevealMessage, "id", a.revealByID("message id",
		func(ctx context.Context, c call, id uuid.UUID) (any, answer, error) {
			return a.revealMessage(ctx, c, id)
		})))
	mux.HandleFunc("POST /api/notifications/{id}/reveal", a.revealRoute(ActionRevealNotification, "id", a.revealByID("notification id",
		func(ctx context.Context, c call, id uuid.UUID) (any, answer, error) {
			return a.revealNotification(ctx, c, id)
		})))
	return a.guard(jsonErrors(mux))
}

// jsonErrors turns the mux's own plain-text 404 and 405 answers (no route; a route for another
// method) into JSON ones.
func jsonErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			w = &plainErrors{ResponseWriter: w}
		}
		mux.ServeHTTP(w, r)
	})
}

// plainErrors replaces the body of a 404 or 405 answer with JSON.
type plainErrors struct {
	http.ResponseWriter
	replaced bool
}

func (p *plainErrors) WriteHeader(code int) {
	if code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
		p.ResponseWriter.WriteHeader(code)
		return
	}
	p.replaced = true
	msg := "no such API route"
	if code == http.StatusMethodNotAllowed {
		msg = "method not allowed (allowed: " + p.Header().Get("Allow") + ")"
	}
	p.Header().Del("Content-Length")
	writeJSON(p.ResponseWriter, code, map[string]string{"error": msg})
}

func (p *plainErrors) Write(b []byte) (int, error) {
	if p.replaced {
		return len(b), nil
	}
	return p.ResponseWriter.Write(b)
}

// get adapts a read to a handler: its value as JSON, or its error.
func (a *Admin) get(read func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := read(r)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// post adapts an action on the id in the path to a rate-limited, authenticated, idempotent,
// audited handler. What is refused before the actor is known gets no audit row ([Admin.turnAway]).
func (a *Admin) post(action, what string, do func(ctx context.Context, id uuid.UUID) error) http.HandlerFunc {
	return a.postOn(action, "id", func(target string) error {
		_, err := parseID(what, target)
		return err
	}, func(ctx context.Context, target string) error {
		id, _ := parseID(what, target)
		return do(ctx, id)
	})
}

// postGID is [Admin.post] for an action on the transaction whose gid is in the path.
func (a *Admin) postGID(action string, do func(ctx context.Context, gid string) error) http.HandlerFunc {
	return a.postOn(action, "gid", checkGID, do)
}

// postOn is post and postGID: check refuses (recorded) a target in the path's {param} before
// the Idempotency-Key is claimed; do is the action.
func (a *Admin) postOn(action, param string, check func(string) error, do func(ctx context.Context, target string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := a.admit(w, r, action, param)
		if !ok {
			return
		}
		c.key = r.Header.Get(signing.HeaderIdempotencyKey)
		if err := pgutil.CheckText(c.key, maxKeyLen); c.key != "" && err != nil {
			a.writeAnswer(w, a.refuse(r.Context(), c.withoutKey(), fmt.Errorf("admin: Idempotency-Key: %v: %w", err, ErrBadRequest)))
			return
		}
		if err := check(c.target); err != nil {
			a.writeAnswer(w, a.refuse(r.Context(), c.withoutKey(), err))
			return
		}
		ans, _ := a.mutate(r.Context(), c, func(ctx context.Context) error { return do(ctx, c.target) })
		if ans.replay {
			w.Header().Set("Idempotent-Replay", "true")
		}
		a.writeAnswer(w, ans)
	}
}

// admit runs what every POST passes first: the per-address rate limit, the bounded body and
// authentication. A request refused here gets no audit row ([Admin.turnAway]); ok is false once it
// is answered. A signed request's call carries its nonce: the hex SHA-256 of its signature, which
// covers the Idempotency-Key, claimed so that a replay within the window gets the first answer and
// never a second effect. The audit table keeps that hash, never the signature.
func (a *Admin) admit(w http.ResponseWriter, r *http.Request, action, param string) (c call, ok bool) {
	c = call{action: action, target: pathTarget(r, param), remote: r.RemoteAddr}
	if a.limit != nil && !a.limit.allow(r.RemoteAddr) {
		a.refused.add(r, refusedRateLimited, nil)
		w.Header().Set("Retry-After", a.limit.retryAfter())
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "too many requests from this address: retry later"})
		return c, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
	body, err := readAll(r)
	if err != nil {
		a.turnAway(w, r, c, refusedBadRequest, fmt.Errorf("admin: request body: %w: %w", err, ErrBadRequest))
		return c, false
	}
	if c.actor, err = a.authenticate(r, body); err != nil {
		a.turnAway(w, r, c, refusedUnauthorized, err)
		return c, false
	}
	// authenticate tried a bearer token first: a request with both is not a signed one.
	if sig := r.Header.Get(signing.HeaderSignature); sig != "" && r.Header.Get("Authorization") == "" {
		sum := sha256.Sum256([]byte(sig))
		c.nonce = hex.EncodeToString(sum[:])
	}
	return c, true
}

// turnAway answers c, refused with err before its actor was known, without an audit row: the
// refusal is counted (txkit_admin_refused_total{reason}) and logged at most every few seconds.
func (a *Admin) turnAway(w http.ResponseWriter, r *http.Request, c call, reason string, err error) {
	a.refused.add(r, reason, err)
	_, status := outcome(err)
	a.writeAnswer(w, answer{status: status, body: a.answerBody(c, err)})
}

// Bounds on what a request puts in the audit table.
const (
	maxKeyLen    = 255 // bytes of an Idempotency-Key
	maxTargetLen = 100 // bytes of the id in the path kept for a refused request
)

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (c call) withoutKey() call { c.key = ""; return c }

func (a *Admin) writeAnswer(w http.ResponseWriter, ans answer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(ans.status)
	_, _ = w.Write(append(ans.body, '\n'))
}

// writeError answers err: its sentinel's status and message, or a 500 naming a request id.
func (a *Admin) writeError(w http.ResponseWriter, r *http.Request, err error) {
	_, status := outcome(err)
	if status == http.StatusInternalServerError {
		id := httpsafe.Log(a.o.log, "admin: "+r.Method+" "+r.URL.Path+" failed", err)
		writeJSON(w, status, map[string]string{"error": "internal error (request id " + id + ")"})
		return
	}
	writeJSON(w, status, map[string]string{"error": message(err)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// parseTxFilter reads the filter of GET /api/transactions.
func parseTxFilter(r *http.Request) (TxFilter, error) {
	q := r.URL.Query()
	f := TxFilter{Kind: q.Get("kind"), Status: q.Get("status"), After: q.Get("after")}
	switch u := q.Get("unfinished"); u {
	case "", "0", "false":
	case "1", "true":
		f.Unfinished = true
	default:
		return f, fmt.Errorf("admin: unfinished=%q: want 1, true, 0 or false: %w", u, ErrBadRequest)
	}
	if s := q.Get("older_than"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return f, fmt.Errorf("admin: older_than=%q: want a duration such as 90s, 10m or 2h: %w", s, ErrBadRequest)
		}
		f.OlderThan = d
	}
	var err error
	f.Limit, err = queryLimit(r)
	return f, err
}

func queryLimit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, fmt.Errorf("admin: limit=%q: want a number from 1 to %d: %w", s, MaxLimit, ErrBadRequest)
	}
	return n, nil
}

func parseID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("admin: %s %q: not a UUID: %w", what, s, ErrBadRequest)
	}
	return id, nil
}
