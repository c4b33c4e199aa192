// Package apptest holds what the register-points services' handler tests share: a pool whose
// database is down, and the check that a failure's answer carries no internal detail.
package apptest

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The names in DownPool's URL: a failed answer must name none of them.
const (
	User     = "rp_secret_user"
	Database = "rp_secret_db"
)

// DownPool returns a pool on a port nothing listens on, as user [User] and database [Database]:
// every query fails with a driver error naming them and the host. It is closed when the test ends.
func DownPool(t testing.TB) (pool *pgxpool.Pool, host string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	pool, err = pgxpool.New(t.Context(), "postgres://"+User+":pw@"+addr+"/"+Database+"?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, addr
}

// Logger returns a logger writing into a buffer the test reads.
func Logger() (*slog.Logger, *bytes.Buffer) {
	var b bytes.Buffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// CheckFailure fails the test unless rec is a 500 whose JSON body has a request id and an error
// message naming neither [User], [Database] nor host, and logs holds the detail under that id.
func CheckFailure(t testing.TB, rec *httptest.ResponseRecorder, host string, logs *bytes.Buffer) {
	t.Helper()
	body := rec.Body.String()
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500; body %s", rec.Code, body)
	}
	for _, secret := range []string{User, Database, host, "127.0.0.1", "dial"} {
		if strings.Contains(body, secret) {
			t.Fatalf("the answer %s names %q", body, secret)
		}
	}
	var ans struct {
		Error     string `json:"error"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil || ans.Error == "" || ans.RequestID == "" {
		t.Fatalf("the answer %s has no error message and request id (%v)", body, err)
	}
	if log := logs.String(); !strings.Contains(log, "request_id="+ans.RequestID) || !strings.Contains(log, Database) {
		t.Fatalf("the log does not hold the detail under request id %s:\n%s", ans.RequestID, log)
	}
}
