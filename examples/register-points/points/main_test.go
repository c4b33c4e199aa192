package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"

	"github.com/txkit/txkit/examples/register-points/internal/apptest"
)

// Reading a user's points when the database is down answers 500 with a short message and a
// request id, not the driver's error naming the database, its user and host.
func TestPointsFailureAnswersNoInternalDetail(t *testing.T) {
	pool, host := apptest.DownPool(t)
	log, logs := apptest.Logger()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/points/x", nil)
	req.SetPathValue("user", uuid.NewString())
	rec := httptest.NewRecorder()
	userPoints(pool, log)(rec, req)
	apptest.CheckFailure(t, rec, host, logs)
}
