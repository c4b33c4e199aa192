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
// this); it only ever sees its own notifications. Answers: 200 with a [Result], 400 for a request
// without id or key, 401 for a bad signature or a timestamp outside ±[DefaultWindow], 404 for a
// notification it does not have, 405 for a method other than GET. The handler is safe for
// concurrent use.
func (n *Notifier) QueryHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		rcv, ok := n.receivers[r.Header.Get(HeaderReceiver)]
		if !ok {
			http.Error(w, "unknown receiver", http.StatusUnauthorized)
			return
		}
		if err := verify(r, nil, rcv.Secrets, time.Now(), DefaultWindow); err != nil {
			n.o.log.Warn("notify: query refused", slog.String("receiver", rcv.Name), slog.Any("err", err))
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
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
				http.Error(w, "bad id: "+perr.Error(), http.StatusBadRequest)
				return
			}
			rec, err = n.Get(r.Context(), id)
			if err == nil && rec.Receiver != rcv.Name {
				err = ErrNotFound // another receiver's: not this one's business
			}
		case q.Get("key") != "":
			rec, err = n.ByKey(r.Context(), rcv.Name, q.Get("key"))
		default:
			http.Error(w, "id or key is required", http.StatusBadRequest)
			return
		}
		switch {
		case errors.Is(err, ErrNotFound):
			http.Error(w, "not found", http.StatusNotFound)
			return
		case err != nil:
			n.o.log.Error("notify: query failed", slog.String("receiver", rcv.Name), slog.Any("err", err))
			http.Error(w, "query failed", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Result{ID: rec.ID, Receiver: rec.Receiver, Key: rec.Key, Payload: rec.Payload,
			Status: rec.Status, Attempts: rec.Attempts, CreatedAt: rec.CreatedAt, DeliveredAt: rec.DeliveredAt})
	})
}

// Client asks a sender's [Notifier.QueryHandler] for results, signing as the receiver Receiver
// with Secret. It is safe for concurrent use.
type Client struct {
	URL      string       // the query handler's URL
	Receiver string       // this receiver's name at the sender
	Secret   string       // one of the receiver's secrets
	HTTP     *http.Client // nil: http.DefaultClient
}

// ByKey asks for the notification of business key. It blocks until the answer or ctx's end. A
// notification the sender does not have returns an error wrapping [ErrNotFound]; a refused
// signature one wrapping [ErrUnauthorized].
func (c Client) ByKey(ctx context.Context, key string) (*Result, error) {
	return c.get(ctx, url.Values{"key": {key}})
}

// ByID asks for the notification id; errors as for [Client.ByKey].
func (c Client) ByID(ctx context.Context, id uuid.UUID) (*Result, error) {
	return c.get(ctx, url.Values{"id": {id.String()}})
}

func (c Client) get(ctx context.Context, q url.Values) (*Result, error) {
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
	signRequest(req, c.Secret, time.Now(), nil)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("notify: query %s: %w", u.RawQuery, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("notify: query %s: %w", u.RawQuery, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, fmt.Errorf("notify: query %s: %w", u.RawQuery, ErrNotFound)
	case http.StatusUnauthorized:
		return nil, fmt.Errorf("notify: query %s: %s: %w", u.RawQuery, body, ErrUnauthorized)
	default:
		return nil, fmt.Errorf("notify: query %s: HTTP %d: %s", u.RawQuery, resp.StatusCode, body)
	}
	var res Result
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("notify: query %s: malformed answer: %w", u.RawQuery, err)
	}
	return &res, nil
}
