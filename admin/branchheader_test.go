package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// The headers an HTTP branch records (participant.HTTP.Header) are shown redacted — size and
// SHA-256 — on every read and revealed by the reveal call, with the branch's own call timeout.
func TestIntegrationBranchHeaderRedacted(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(srv.Close)
	c, err := tcc.New(w.s.Pool, coordinator.WithSchema(w.s.Name))
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Begin(ctx, coordinator.WithTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	const tenant = "tenant-4711"
	if err := g.Try(ctx, tcc.Branch{Name: "stock", Timeout: 1500 * time.Millisecond,
		Participant: participant.HTTP{URL: srv.URL, Header: http.Header{"X-Tenant": {tenant}}}}); err != nil {
		t.Fatal(err)
	}
	a := w.newAdmin(t, admin.WithTokens(nil, map[string]string{"viewer": viewerToken}))
	cl := serve(t, a)
	r := cl.do("GET", "/api/transactions/"+g.GID(), viewer...)
	cl.want(r, 200)
	if strings.Contains(string(r.body), tenant) {
		t.Fatalf("GET shows the header's value: %s", r.body)
	}
	var tx admin.Transaction
	r.decode(t, &tx)
	b := tx.Branches[0]
	if h := b.Header["X-Tenant"]; len(h) != 1 || h[0].Size != len(tenant) || h[0].SHA256 != sum(tenant) || h[0].Value != nil || b.TimeoutMS != 1500 {
		t.Fatalf("branch header %+v, timeout %dms: want size and sha256 only, 1500ms", b.Header, b.TimeoutMS)
	}
	r = cl.do("POST", "/api/transactions/"+g.GID()+"/reveal", bearer...)
	cl.want(r, 200)
	r.decode(t, &tx)
	if h := tx.Branches[0].Header["X-Tenant"]; len(h) != 1 || string(h[0].Value) != tenant {
		t.Fatalf("revealed branch header %+v", tx.Branches[0].Header)
	}
}
