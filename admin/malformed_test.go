package admin_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// syncBuffer is a bytes.Buffer safe for the handler's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A gid or cursor PostgreSQL cannot hold (a NUL byte, invalid UTF-8) names no transaction: 404 for
// a gid, 400 for a cursor, and no error logged. Before, PostgreSQL refused the query: 500, and an
// ERROR in the log per request.
func TestIntegrationAPIMalformedGID(t *testing.T) {
	s := testenv.PG(t)
	l, err := core.New(s.Pool, core.WithSchema(s.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Create(t.Context(), "g1", core.KindTCC, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	var logged syncBuffer
	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithTokens(nil, map[string]string{"dashboard": oncallToken}),
		admin.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, a).with(bearer...)
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/api/transactions/a%00b", http.StatusNotFound},
		{"/api/transactions/%ff", http.StatusNotFound},
		{"/api/transactions/a%c3", http.StatusNotFound},
		{"/api/transactions?after=%00", http.StatusBadRequest},
		{"/api/transactions?after=%ff", http.StatusBadRequest},
		{"/api/transactions?after=g%00&limit=2", http.StatusBadRequest},
	} {
		t.Run(tc.path, func(t *testing.T) {
			c := client{t: t, url: c.url, hdr: c.hdr}
			c.want(c.do(http.MethodGet, tc.path), tc.code)
		})
	}
	c.want(c.do(http.MethodGet, "/api/transactions/g1"), http.StatusOK, `"gid":"g1"`)
	if out := logged.String(); strings.Contains(out, "level=ERROR") {
		t.Fatalf("malformed requests logged errors:\n%s", out)
	}
}
