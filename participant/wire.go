package participant

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/participant/internal/refusal"
)

// Op is what a coordinator asks of a participant's branch.
type Op uint8

// The operations of TCC (Try, Confirm, Cancel), of sagas (Action, Compensate), of two-phase
// commit (Prepare, Commit, Abort) and of three-phase commit (CanCommit, PreCommit, DoCommit, and
// Abort, shared with two-phase commit).
const (
	OpTry Op = iota + 1
	OpConfirm
	OpCancel
	OpAction
	OpCompensate
	OpPrepare
	OpCommit
	OpAbort
	// OpCanCommit is 3PC's vote: a read-only check that the branch could commit; nothing is
	// executed, locked or written. A "no" wraps [ErrRefused].
	OpCanCommit
	// OpPreCommit is 3PC's second phase: the branch executes its work reversibly and remembers it
	// durably (see package threepc/agent).
	OpPreCommit
	// OpDoCommit is 3PC's decision to commit: the branch makes its pre-committed work final.
	OpDoCommit
)

var opNames = map[Op]string{
	OpTry: "try", OpConfirm: "confirm", OpCancel: "cancel", OpAction: "action", OpCompensate: "compensate",
	OpPrepare: "prepare", OpCommit: "commit", OpAbort: "abort",
	OpCanCommit: "cancommit", OpPreCommit: "precommit", OpDoCommit: "docommit",
}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// ParseOp reads an Op from its String form.
func ParseOp(s string) (Op, error) {
	for o, n := range opNames {
		if n == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("participant: unknown op %q: %w", s, ErrBadRequest)
}

// MarshalText writes the op's name ("try", "confirm", ...).
func (o Op) MarshalText() ([]byte, error) {
	if _, ok := opNames[o]; !ok {
		return nil, fmt.Errorf("participant: unknown op %d: %w", uint8(o), ErrBadRequest)
	}
	return []byte(o.String()), nil
}

// UnmarshalText reads the op's name.
func (o *Op) UnmarshalText(b []byte) error {
	v, err := ParseOp(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// Request is what a coordinator sends a participant: the global transaction, the branch, the
// operation and the branch's payload. Over HTTP it is the JSON body of a POST.
type Request struct {
	GID     string          `json:"gid"`
	Branch  string          `json:"branch"`
	Op      Op              `json:"op"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// StatusRefused is the HTTP status a participant answers for a business refusal (insufficient
// stock, a frozen account): the coordinator rolls the global transaction back instead of retrying.
// 2xx means success; any other status, or no answer, means "try again later".
const StatusRefused = http.StatusConflict

// Sentinel errors.
var (
	// ErrRefused: the participant refused for a business reason; roll back, do not retry.
	ErrRefused = errors.New("participant: refused")
	// ErrBadRequest: the request or reply is malformed.
	ErrBadRequest = errors.New("participant: bad request")
)

// Participant is an in-process participant: Do carries out req and returns nil, an error wrapping
// [ErrRefused] for a business refusal, or any other error to be retried.
type Participant interface {
	Do(ctx context.Context, req Request) error
}

// ParticipantFunc adapts a function to [Participant].
type ParticipantFunc func(ctx context.Context, req Request) error

// Do calls f.
func (f ParticipantFunc) Do(ctx context.Context, req Request) error { return f(ctx, req) }

// HTTP is a [Participant] reached by POSTing the JSON Request to URL.
//
// A branch's HTTP leaves Client nil: the coordinator calls it with its own client
// (coordinator.WithHTTPClient), and refuses a branch with another. Client signs the requests when
// it was built by [NewSigningClient], as a barrier handler with secrets requires (package
// participant/barrier); a nil Client used directly sends them unsigned, for a barrier
// built with barrier.WithUnsignedRequests (behind mutual TLS, say — then give a Client with the TLS settings). A
// nil Client does not follow redirects; a client of your own should not either (see
// [NewSigningClient]): a 307 or 308 would re-post the request to wherever it points.
//
// Header is sent with every request (Content-Type and the trace headers are set over it). A
// coordinator records it with the branch, so that the recovery's calls send it too: it is stored
// in the log as it is, and a coordinator refuses a Header that may hold a credential (see
// coordinator.Branch); give credentials to the client instead.
type HTTP struct {
	URL    string
	Client *http.Client // nil: a client with http.DefaultTransport that follows no redirect
	Header http.Header  // nil: none
}

// wireRequest is the body HTTP.Do posts: the Request, and a random nonce that makes two sends of
// one request differ, so that a participant refusing replayed signatures does not refuse a
// coordinator's retry signed within the same second. Participants ignore it.
type wireRequest struct {
	Request
	Nonce string `json:"nonce"`
}

// Do posts req and maps the answer: 2xx → nil, [StatusRefused] → an error wrapping [ErrRefused],
// anything else (or a transport error) → an error the coordinator retries. When ctx carries a
// span, Do sends its W3C trace context (traceparent, tracestate headers), so that the
// participant's span (barrier.Barrier.Handler) joins the trace. It blocks until the answer or ctx's end.
func (h HTTP) Do(ctx context.Context, req Request) error {
	body, err := json.Marshal(wireRequest{Request: req, Nonce: rand.Text()})
	if err != nil {
		return fmt.Errorf("participant: encode %s %s/%s: %w", req.Op, req.GID, req.Branch, err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("participant: %s %s: %w", req.Op, h.URL, err)
	}
	for k, vs := range h.Header {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	hr.Header.Set("Content-Type", "application/json")
	injectTrace(ctx, hr.Header)
	c := h.Client
	if c == nil {
		c = noRedirectClient(nil)
	}
	resp, err := c.Do(hr)
	if err != nil {
		return fmt.Errorf("participant: %s %s/%s at %s: %w", req.Op, req.GID, req.Branch, h.URL, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == StatusRefused:
		if reason := refusal.Reason(string(msg), ErrRefused.Error()); reason != "" {
			return fmt.Errorf("participant: %s %s/%s at %s: %w: %s", req.Op, req.GID, req.Branch, h.URL, ErrRefused, reason)
		}
		return fmt.Errorf("participant: %s %s/%s at %s: %w", req.Op, req.GID, req.Branch, h.URL, ErrRefused)
	default:
		return fmt.Errorf("participant: %s %s/%s at %s: HTTP %d: %s", req.Op, req.GID, req.Branch, h.URL, resp.StatusCode, bytes.TrimSpace(msg))
	}
}

// injectTrace sets h's W3C trace headers from ctx (nothing when ctx carries no span).
func injectTrace(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		obs.Propagator().Inject(ctx, propagation.HeaderCarrier(h))
	}
}
