package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/core"
)

// Secret stands for a value that may hold personal or secret data — a transaction's or branch's
// payload, an outbox message's body or a header's value, a notification's payload: its size and
// SHA-256 (hex), enough to tell two values apart or to recognise one the operator holds. Value is
// filled only by the Reveal calls ([Admin.RevealTransaction], [Admin.RevealMessage],
// [Admin.RevealNotification]), each of which the audit table records.
type Secret struct {
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
	Value  []byte `json:"value,omitempty"` // base64 in JSON
	// JSON is Value again when it is a JSON document, so that the API shows it as JSON rather
	// than base64; nil otherwise, and whenever Value is.
	JSON json.RawMessage `json:"json,omitempty"`
}

// The actions of the Reveal calls, as the audit table records them.
const (
	ActionRevealTx           = "tx.reveal"
	ActionRevealMessage      = "outbox.reveal"
	ActionRevealNotification = "notify.reveal"
)

// secret is b redacted, or with its value when reveal.
func secret(b []byte, reveal bool) Secret {
	sum := sha256.Sum256(b)
	s := Secret{Size: len(b), SHA256: hex.EncodeToString(sum[:])}
	if reveal {
		s.Value = b
		if json.Valid(b) {
			s.JSON = json.RawMessage(b)
		}
	}
	return s
}

// optSecret is secret(b), or nil when there is no value.
func optSecret(b []byte, reveal bool) *Secret {
	if len(b) == 0 {
		return nil
	}
	s := secret(b, reveal)
	return &s
}

// headerSecrets is h with every value redacted (revealed when reveal, but never a value whose
// name may carry a credential, which coordinators refuse to record), or nil when h is empty.
func headerSecrets(h http.Header, reveal bool) map[string][]Secret {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string][]Secret, len(h))
	for k, vs := range h {
		for _, v := range vs {
			out[k] = append(out[k], secret([]byte(v), reveal && !core.SensitiveHeader(k)))
		}
	}
	return out
}

// targetRef is a branch's target for display: an http URL without its password.
func targetRef(kind, ref string) string {
	if kind != "http" {
		return ref
	}
	u, err := url.Parse(ref)
	if err != nil {
		return ref
	}
	return u.Redacted()
}

// RevealTransaction is [Admin.Transaction] with the payloads' values, read on behalf of actor and
// recorded in the audit table (action [ActionRevealTx]). Its errors are Transaction's.
func (a *Admin) RevealTransaction(ctx context.Context, actor, gid string) (*Transaction, error) {
	t, _, err := a.revealTx(ctx, call{actor: actor, action: ActionRevealTx, target: gid})
	return t, err
}

// RevealMessage returns the outbox message id (dead or not) with its body's and headers' values,
// read on behalf of actor and recorded in the audit table (action [ActionRevealMessage]). An
// unknown id returns an error wrapping [ErrNotFound].
func (a *Admin) RevealMessage(ctx context.Context, actor string, id uuid.UUID) (*DeadMessage, error) {
	m, _, err := a.revealMessage(ctx, call{actor: actor, action: ActionRevealMessage, target: id.String()}, id)
	return m, err
}

// RevealNotification is [Admin.Notification] with the payload's value, read on behalf of actor
// and recorded in the audit table (action [ActionRevealNotification]). Its errors are
// Notification's.
func (a *Admin) RevealNotification(ctx context.Context, actor string, id uuid.UUID) (*Notification, error) {
	n, _, err := a.revealNotification(ctx, call{actor: actor, action: ActionRevealNotification, target: id.String()}, id)
	return n, err
}

// The reveals run through mutate without an Idempotency-Key: one audit row each, never a stored
// answer (the answer holds what the row must not).

func (a *Admin) revealTx(ctx context.Context, c call) (t *Transaction, ans answer, err error) {
	ans, err = a.mutate(ctx, c, func(ctx context.Context) (err error) {
		t, err = a.transaction(ctx, c.target, true)
		return err
	})
	return t, ans, err
}

func (a *Admin) revealMessage(ctx context.Context, c call, id uuid.UUID) (m *DeadMessage, ans answer, err error) {
	ans, err = a.mutate(ctx, c, func(ctx context.Context) (err error) {
		m, err = a.message(ctx, id)
		return err
	})
	return m, ans, err
}

func (a *Admin) revealNotification(ctx context.Context, c call, id uuid.UUID) (n *Notification, ans answer, err error) {
	ans, err = a.mutate(ctx, c, func(ctx context.Context) (err error) {
		n, err = a.notification(ctx, id, true)
		return err
	})
	return n, ans, err
}

// revealRoute adapts a reveal of the thing named by the path's {param} to an authenticated,
// audited handler. It takes the credentials a mutation takes: a read token is refused.
func (a *Admin) revealRoute(action, param string, reveal func(context.Context, call) (any, answer, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := a.admit(w, r, action, param)
		if !ok {
			return
		}
		v, ans, err := reveal(r.Context(), c)
		if err != nil || ans.replay {
			// A replay of a signed reveal gets the first call's answer, never the values again.
			if ans.replay {
				w.Header().Set("Idempotent-Replay", "true")
			}
			a.writeAnswer(w, ans)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// revealByID is a reveal route's function for a thing named by a UUID: a target that is not one
// is refused (and recorded) with 400.
func (a *Admin) revealByID(what string, reveal func(context.Context, call, uuid.UUID) (any, answer, error)) func(context.Context, call) (any, answer, error) {
	return func(ctx context.Context, c call) (any, answer, error) {
		id, err := parseID(what, c.target)
		if err != nil {
			return nil, a.refuse(ctx, c, err), err
		}
		return reveal(ctx, c, id)
	}
}

// pathTarget is the path's {name} as the audit table keeps it: clipped, valid UTF-8, no NUL; kept
// as text even when it is not an id (a refused request's is recorded too).
func pathTarget(r *http.Request, name string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(clip(r.PathValue(name), maxTargetLen), "\x00", ""), "\uFFFD")
}
