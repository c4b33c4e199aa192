package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/httpsafe"
	"github.com/txkit/txkit/internal/signing"
)

// Result is the answer to a query: the notification as the sender keeps it.
type Result struct {
	ID          uuid.UUID       `json:"id"`
	Receiver    string          `json:"receiver"`
	Key         string          `json:"key"`
	Payload     json.RawMessage `json:"payload"`
	Status      Status          `json:"status"`
	Attempts    int             `json:"attempts"`
	CreatedAt   time.Time       `json:"created_at"`
	DeliveredAt *time.Time      `json:"delivered_at,omitempty"`
}

// DefaultWindow is how far a signed request's timestamp may be from the verifier's clock.
const DefaultWindow = 5 * time.Minute

// QueryHandler returns the handler the sender mounts (GET) for its receivers to ask for a result:
// ?id=<notification id> or ?key=<business key>. The receiver names itself in the
// X-Txkit-Receiver header and signs the request with one of its secrets ([Client] does all
// this); it only ever sees its own notifications. Once the request verifies, every answer is
// signed with the receiver's current secret (its first) over the status, the request's method and
// target, and the body, so the receiver can tell the sender's answer from a forged one. Answers:
// 200 with a [Result], 400 for a request without id or key, 401 (unsigned, fixed text) for an
// unknown receiver, a bad signature or a timestamp outside ±[DefaultWindow], 404 for a
// notification it does not have, 405 for a method other than GET, 500 (unsigned, with a request
// id naming the logged error) when the database fails. No answer carries an error's text. The
// handler is safe for concurrent use.
func (n *Notifier) QueryHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		name := r.Header.Get(HeaderReceiver)
		rcv, ok := n.receivers[name]
		if !ok {
			n.o.log.WarnContext(r.Context(), "notify: query refused: unknown receiver", slog.String("receiver", name))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if err := verify(r, nil, rcv.Secrets, time.Now(), DefaultWindow); err != nil {
			n.o.log.WarnContext(r.Context(), "notify: query refused", slog.String("receiver", rcv.Name), slog.Any("err", err))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		answer := func(status int, v any) {
			body, err := json.Marshal(v)
			if err != nil {
				httpsafe.Error(w, n.o.log, http.StatusInternalServerError, "query failed", err, slog.String("receiver", rcv.Name))
				return
			}
			signing.SetResponseHeaders(w.Header(), r, rcv.Secrets[0], time.Now(), status, body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(body)
		}
		var (
			rec *Record
			err error
		)
		q := r.URL.Query()
		switch {
		case q.Get("id") != "":
			id, perr := uuid.Parse(q.Get("id"))
			if perr != nil {
				answer(http.StatusBadRequest, queryError{"bad id"})
				return
			}
			rec, err = n.Get(r.Context(), id)
			if err == nil && rec.Receiver != rcv.Name {
				err = ErrNotFound // another receiver's: not this one's business
			}
		case q.Get("key") != "":
			rec, err = n.ByKey(r.Context(), rcv.Name, q.Get("key"))
		default:
			answer(http.StatusBadRequest, queryError{"id or key is required"})
			return
		}
		switch {
		case errors.Is(err, ErrNotFound):
			answer(http.StatusNotFound, queryError{"not found"})
		case err != nil:
			httpsafe.Error(w, n.o.log, http.StatusInternalServerError, "query failed", err, slog.String("receiver", rcv.Name))
		default:
			answer(http.StatusOK, Result{ID: rec.ID, Receiver: rec.Receiver, Key: rec.Key, Payload: rec.Payload,
				Status: rec.Status, Attempts: rec.Attempts, CreatedAt: rec.CreatedAt, DeliveredAt: rec.DeliveredAt})
		}
	})
}

// queryError is the body of the query handler's signed answers other than 200.
type queryError struct {
	Error string `json:"error"`
}

// Client asks a sender's [Notifier.QueryHandler] for results as the receiver Receiver: it signs
// each query with the first of Secrets and believes only answers signed with one of them (the
// sender signs with the receiver's current secret; give both during a key rotation). URL must be
// https:// unless PlainHTTP is set. With HTTP nil it uses a client of its own that does not follow
// redirects. It is safe for concurrent use.
type Client struct {
	URL       string       // the query handler's URL
	Receiver  string       // this receiver's name at the sender
	Secrets   []string     // the receiver's secrets (each at least 16 bytes): the first signs
	HTTP      *http.Client // nil: a client that does not follow redirects
	PlainHTTP bool         // allow an http:// URL (tests, the loopback interface); see [WithPlainHTTP]
}

// ByKey asks for the notification of business key. It blocks until the answer or ctx's end. A
// notification the sender does not have returns an error wrapping [ErrNotFound]; a refused
// query, an answer whose signature does not verify, or one about another receiver or key, one
// wrapping [ErrUnauthorized]; an unusable URL or secret one wrapping [ErrInvalidOption].
func (c Client) ByKey(ctx context.Context, key string) (*Result, error) {
	return c.get(ctx, url.Values{"key": {key}})
}

// ByID asks for the notification id; errors as for [Client.ByKey].
func (c Client) ByID(ctx context.Context, id uuid.UUID) (*Result, error) {
	return c.get(ctx, url.Values{"id": {id.String()}})
}

func (c Client) get(ctx context.Context, q url.Values) (*Result, error) {
	if err := checkURL(c.URL, c.PlainHTTP); err != nil {
		return nil, fmt.Errorf("notify: query: %w", err)
	}
	if err := signing.CheckSecrets(c.Secrets); err != nil {
		return nil, fmt.Errorf("notify: query as %s: %w: %w", c.Receiver, err, ErrInvalidOption)
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, fmt.Errorf("notify: query URL %q: %w: %w", c.URL, err, ErrInvalidOption)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("notify: query %s: %w", u, err)
	}
	req.Header.Set(HeaderReceiver, c.Receiver)
	signRequest(req, c.Secrets[0], time.Now(), nil)
	hc := c.HTTP
	if hc == nil {
		hc = newHTTPClient()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("notify: query %s: %w", u.RawQuery, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDeliveryLen+1))
	if err != nil {
		return nil, fmt.Errorf("notify: query %s: %w", u.RawQuery, err)
	}
	if len(body) > maxDeliveryLen {
		return nil, fmt.Errorf("notify: query %s: answer longer than %d bytes: %w", u.RawQuery, maxDeliveryLen, ErrTooLarge)
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNotFound, http.StatusBadRequest:
		if err := signing.VerifyResponse(resp, body, c.Secrets, time.Now(), DefaultWindow); err != nil {
			return nil, fmt.Errorf("notify: query %s: HTTP %d answer: %w: %w", u.RawQuery, resp.StatusCode, ErrUnauthorized, err)
		}
	case http.StatusUnauthorized:
		return nil, fmt.Errorf("notify: query %s: refused by the sender: %w", u.RawQuery, ErrUnauthorized)
	default:
		return nil, fmt.Errorf("notify: query %s: HTTP %d: %.200s", u.RawQuery, resp.StatusCode, body)
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil, fmt.Errorf("notify: query %s: %w", u.RawQuery, ErrNotFound)
	case http.StatusBadRequest:
		return nil, fmt.Errorf("notify: query %s: HTTP 400: %.200s: %w", u.RawQuery, body, ErrInvalidOption)
	}
	var res Result
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("notify: query %s: malformed answer: %w", u.RawQuery, err)
	}
	if res.Receiver != c.Receiver || (q.Has("key") && res.Key != q.Get("key")) || (q.Has("id") && res.ID.String() != q.Get("id")) {
		return nil, fmt.Errorf("notify: query %s: the answer is about %s/%s (%s), not what was asked: %w",
			u.RawQuery, res.Receiver, res.Key, res.ID, ErrUnauthorized)
	}
	return &res, nil
}
