package coretest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txkit/txkit/participant"
)

// Call is one call a [Receiver] received.
type Call struct {
	Op     participant.Op // from the request body (zero when it holds no participant.Request)
	Header http.Header
	Hangs  bool          // the Receiver's hang func chose it to hang
	Hung   time.Duration // how long it hung until the caller gave up; zero while it still hangs
}

// Receiver is an HTTP participant that records every call it receives, with its headers, and
// answers 200 OK; a call its hang func chooses first hangs until the caller gives up (or the test
// ends). It is safe for concurrent use.
type Receiver struct {
	URL string

	mu    sync.Mutex
	calls []Call
}

// NewReceiver starts a Receiver, closed when the test ends. hang is asked, as each call arrives,
// whether it hangs; n is how many calls of the same op arrived before it.
func NewReceiver(t testing.TB, hang func(op participant.Op, n int) bool) *Receiver {
	r := &Receiver{}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body participant.Request
		_ = json.NewDecoder(req.Body).Decode(&body)
		_, _ = io.Copy(io.Discard, req.Body) // so that the server notices the client hanging up
		r.mu.Lock()
		n := 0
		for _, c := range r.calls {
			if c.Op == body.Op {
				n++
			}
		}
		i := len(r.calls)
		r.calls = append(r.calls, Call{Op: body.Op, Header: req.Header.Clone(), Hangs: hang(body.Op, n)})
		hangs := r.calls[i].Hangs
		r.mu.Unlock()
		if hangs {
			start := time.Now()
			select {
			case <-req.Context().Done():
			case <-stop:
			}
			r.mu.Lock()
			r.calls[i].Hung = time.Since(start)
			r.mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first: no handler hangs on
	r.URL = srv.URL
	return r
}

// Calls returns the calls received so far, in the order they arrived.
func (r *Receiver) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}
