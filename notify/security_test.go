package notify_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/notify"
)

// signedDelivery builds a delivery request to url with body, signed with key at ts.
func signedDelivery(t *testing.T, url, key string, ts time.Time, id uuid.UUID, body []byte) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set(notify.HeaderID, id.String())
	r.Header.Set(notify.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	r.Header.Set(notify.HeaderSignature, notify.Sign(key, ts.Unix(), http.MethodPost, "/", body))
	return r
}

// do sends r and returns the answer's status and body.
func do(t *testing.T, r *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Reconcile believes only the sender: an unsigned answer (anyone between the receiver and the
// sender, or a fake sender) and a signed answer about another key or another receiver apply
// nothing and return an error wrapping ErrUnauthorized; a receiver URL or a query URL that is
// plain http:// is refused unless allowed.
func TestIntegrationReconcileBelievesOnlyTheSender(t *testing.T) {
	w := newWorld(t)
	// A fake query API answering every question with a result of its choosing, for key and
	// receiver, signed with sign (empty: unsigned).
	fake := func(key, receiver, sign string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			body := fmt.Appendf(nil, `{"id":%q,"receiver":%q,"key":%q,"payload":{"amount":1000000},"status":"pending","attempts":0,"created_at":"2026-01-01T00:00:00Z"}`,
				uuid.New(), receiver, key)
			if sign != "" {
				signing.SetResponseHeaders(rw.Header(), r, sign, time.Now(), http.StatusOK, body)
			}
			_, _ = rw.Write(body)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	for _, tc := range []struct {
		name string
		srv  *httptest.Server
	}{
		{"unsigned answer", fake("order-9", "shop", "")},
		{"answer signed with another key", fake("order-9", "shop", "not-the-secret-0123456789")},
		{"signed answer about another key", fake("order-other", "shop", secret)},
		{"signed answer for another receiver", fake("order-9", "other", secret)},
	} {
		applied, err := w.inbox.Reconcile(t.Context(), w.client(tc.srv.URL, secret), "order-9")
		if applied != 0 || !errors.Is(err, notify.ErrUnauthorized) {
			t.Errorf("%s: Reconcile = %d, %v; want 0 and ErrUnauthorized", tc.name, applied, err)
		}
	}
	if got := w.applied("order-9") + w.applied("order-other"); got != 0 {
		t.Errorf("forged answers applied %d times", got)
	}

	// A Client checks what it is told too: an answer to ByID about another notification.
	other := fake("order-9", "shop", secret) // answers with an id of its own
	if _, err := w.client(other.URL, secret).ByID(t.Context(), uuid.New()); !errors.Is(err, notify.ErrUnauthorized) {
		t.Errorf("ByID answered about another id = %v, want ErrUnauthorized", err)
	}

	// The real sender's answers verify.
	n := w.notifier(w.receivers())
	query := httptest.NewServer(n.QueryHandler())
	t.Cleanup(query.Close)
	w.enqueue(n, "shop", "order-9", 9)
	if applied, err := w.inbox.Reconcile(t.Context(), w.client(query.URL, secret), "order-9"); applied != 1 || err != nil {
		t.Errorf("Reconcile with the sender = %d, %v; want 1 applied", applied, err)
	}

	// Plain http:// is refused where it is not allowed.
	if _, err := strictNotifier(w, w.receivers()); !errors.Is(err, notify.ErrInvalidOption) {
		t.Errorf("New with an http:// receiver URL = %v, want ErrInvalidOption", err)
	}
	if _, err := w.strictClient(query.URL, secret).ByKey(t.Context(), "order-9"); !errors.Is(err, notify.ErrInvalidOption) {
		t.Errorf("a Client asking an http:// URL = %v, want ErrInvalidOption", err)
	}
}

// An oversized payload or key is refused at Enqueue with an error wrapping ErrTooLarge, and
// nothing is written; the Inbox answers 413 to a body longer than any delivery, not a 401 after
// reading part of it.
func TestIntegrationSizeLimits(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers())
	ctx := t.Context()
	big := json.RawMessage(`"` + strings.Repeat("a", maxPayload-1) + `"`) // maxPayload+1 bytes of JSON
	for name, nt := range map[string]notify.Notification{
		"payload": {Receiver: "shop", Key: "big-payload", Payload: big},
		"key":     {Receiver: "shop", Key: strings.Repeat("k", 201), Payload: json.RawMessage(`{}`)},
	} {
		err := pgx.BeginFunc(ctx, w.sender.Pool, func(tx pgx.Tx) error { _, err := n.Enqueue(ctx, tx, nt); return err })
		if !errors.Is(err, errTooLarge) || !errors.Is(err, notify.ErrInvalidNotification) {
			t.Errorf("Enqueue with an oversized %s = %v, want ErrTooLarge and ErrInvalidNotification", name, err)
		}
	}
	var rows int
	if err := w.sender.Pool.QueryRow(ctx, `select count(*) from `+w.sender.Name+`.txkit_notify`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d notifications written by refused enqueues", rows)
	}
	// A payload of exactly the limit goes through.
	fits := json.RawMessage(`"` + strings.Repeat("a", maxPayload-2) + `"`)
	if err := pgx.BeginFunc(ctx, w.sender.Pool, func(tx pgx.Tx) error {
		_, err := n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: "fits", Payload: fits})
		return err
	}); err != nil {
		t.Fatalf("Enqueue of a payload of the limit: %v", err)
	}

	id := uuid.New()
	body := fmt.Appendf(nil, `{"id":%q,"receiver":"shop","key":"huge","payload":"%s","created_at":"2026-01-01T00:00:00Z"}`,
		id, strings.Repeat("a", maxPayload+64<<10))
	if code, answer := do(t, signedDelivery(t, w.srv.URL, secret, time.Now(), id, body)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a signed delivery longer than any delivery: %d %q, want 413", code, answer)
	}
}

// No answer of the Inbox or the query handler carries an error's text: refusals are a fixed
// "unauthorized", failures a short message with a request id.
func TestIntegrationAnswersCarryNoInternalText(t *testing.T) {
	w := newWorld(t)
	now := time.Now()
	internal := []string{"signature", "timestamp", "cannot unmarshal", "notify:", "uuid", "length"}
	check := func(name string, code int, body string, wantCode int, want string) {
		t.Helper()
		if code != wantCode || !strings.Contains(body, want) {
			t.Errorf("%s: %d %q, want %d with %q", name, code, body, wantCode, want)
		}
		for _, s := range internal {
			if strings.Contains(strings.ToLower(body), s) {
				t.Errorf("%s: answer %q carries %q", name, body, s)
			}
		}
	}
	id := uuid.New()
	good := fmt.Appendf(nil, `{"id":%q,"receiver":"shop","key":"k","payload":{"amount":1},"created_at":"2026-01-01T00:00:00Z"}`, id)
	code, body := do(t, signedDelivery(t, w.srv.URL, "not-the-secret-0123456789", now, id, good))
	check("delivery with a wrong key", code, body, http.StatusUnauthorized, "unauthorized")
	code, body = do(t, signedDelivery(t, w.srv.URL, secret, now.Add(-time.Hour), id, good))
	check("stale delivery", code, body, http.StatusUnauthorized, "unauthorized")
	bad := fmt.Appendf(nil, `{"id":%q,"receiver":"shop","key":"k","payload":{"amount":"x"},"created_at":"2026-01-01T00:00:00Z"}`, id)
	code, body = do(t, signedDelivery(t, w.srv.URL, secret, now, id, bad))
	check("delivery whose apply fails", code, body, http.StatusInternalServerError, "request id")

	n := w.notifier(w.receivers())
	query := httptest.NewServer(n.QueryHandler())
	t.Cleanup(query.Close)
	ask := func(key, target string) *http.Request {
		r, err := http.NewRequestWithContext(t.Context(), http.MethodGet, query.URL+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set(notify.HeaderReceiver, "shop")
		ts := time.Now().Unix()
		r.Header.Set(notify.HeaderTimestamp, strconv.FormatInt(ts, 10))
		r.Header.Set(notify.HeaderSignature, notify.Sign(key, ts, http.MethodGet, target, nil))
		return r
	}
	code, body = do(t, ask("not-the-secret-0123456789", "/?key=k"))
	check("query with a wrong key", code, body, http.StatusUnauthorized, "unauthorized")
	code, body = do(t, ask(secret, "/?id=not-a-uuid"))
	check("query with a bad id", code, body, http.StatusBadRequest, "bad id")
}

// The notifier does not follow redirects: a receiver answering 307 gets a failed attempt, and the
// signed delivery is not posted where it points; nor does a Client's query follow one.
func TestIntegrationNoRedirects(t *testing.T) {
	w := newWorld(t)
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = rw.Write([]byte("success"))
	}))
	t.Cleanup(other.Close)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		http.Redirect(rw, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		return true
	})
	n := w.running("a", w.receivers())
	nt := w.enqueue(n, "shop", "order-r", 1)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		as, err := n.Attempts(t.Context(), nt.ID)
		return err == nil && len(as) >= 1
	}, "no attempt of the redirected notification recorded")
	as, _ := n.Attempts(t.Context(), nt.ID)
	if as[0].StatusCode != http.StatusTemporaryRedirect || elsewhere.Load() != 0 {
		t.Fatalf("attempts %+v, %d posts where the redirect points; want 307 and none", as, elsewhere.Load())
	}
	if rec, _ := n.Get(t.Context(), nt.ID); rec.Status == notify.StatusDelivered {
		t.Fatal("delivered through a redirect")
	}
	if _, err := w.client(w.srv.URL, secret).ByKey(t.Context(), "order-r"); err == nil || elsewhere.Load() != 0 {
		t.Fatalf("a query answered by a redirect: %v, %d requests where it points; want an error and none", err, elsewhere.Load())
	}
}

// Secrets shorter than 16 bytes are refused, for receivers and for an Inbox; an Inbox refuses a
// delivery, however well signed, that names another receiver.
func TestIntegrationSecretsAndReceiverChecked(t *testing.T) {
	w := newWorld(t)
	short := []notify.Receiver{{Name: "shop", URL: w.srv.URL, Secrets: []string{"s3cret"}}}
	if _, err := plainNotifier(w, short); !errors.Is(err, notify.ErrInvalidOption) {
		t.Errorf("New with a 6-byte secret = %v, want ErrInvalidOption", err)
	}
	if err := w.newInbox([]string{secret, "s3cret"}); !errors.Is(err, notify.ErrInvalidOption) {
		t.Errorf("NewInbox with a 6-byte secret = %v, want ErrInvalidOption", err)
	}
	id := uuid.New()
	body := fmt.Appendf(nil, `{"id":%q,"receiver":"other","key":"order-x","payload":{"amount":1},"created_at":"2026-01-01T00:00:00Z"}`, id)
	if code, answer := do(t, signedDelivery(t, w.srv.URL, secret, time.Now(), id, body)); code != http.StatusUnauthorized {
		t.Errorf("a delivery for another receiver: %d %q, want 401", code, answer)
	}
	if got := w.applied("order-x"); got != 0 {
		t.Fatalf("another receiver's delivery applied %d times", got)
	}
}
