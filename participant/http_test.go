package participant_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/txkit/txkit/participant"
)

const testSecret = "test-secret-0123456789abcdef"

// Low: a participant answering a redirect is not followed — the signed body is not re-posted
// elsewhere — whether HTTP has no client or the signing one.
func TestHTTPDoesNotFollowRedirects(t *testing.T) {
	var hits atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(elsewhere.Close)
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+"/stolen", code)
		}))
		t.Cleanup(redirect.Close)
		signer, err := participant.NewSigningClient(testSecret, nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*http.Client{"nil client": nil, "signing client": signer} {
			err := participant.HTTP{URL: redirect.URL, Client: c}.Do(t.Context(), participant.Request{GID: "g1", Branch: "b", Op: participant.OpTry})
			if err == nil || hits.Load() != 0 {
				t.Errorf("%s, %d: Do = %v and the other server was called %d times; want an error and no call", name, code, err, hits.Load())
			}
		}
	}
}
