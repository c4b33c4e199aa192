package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/txkit/txkit/examples/register-points/internal/apptest"
	"github.com/txkit/txkit/outbox"
)

// A registration that fails (the database is down) answers 500 with a short message and a
// request id, not the driver's error naming the database, its user and host: that detail is in
// the log under the request id.
func TestRegisterFailureAnswersNoInternalDetail(t *testing.T) {
	pool, host := apptest.DownPool(t)
	ob, err := outbox.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	log, logs := apptest.Logger()
	s := &service{c: config{topic: "txkit-user-registered", mode: "outbox"}, pool: pool, log: log, ob: ob}
	rec := httptest.NewRecorder()
	s.register(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/users", strings.NewReader(`{"name":"ann"}`)))
	apptest.CheckFailure(t, rec, host, logs)
}
