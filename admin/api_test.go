package admin_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/signing"
)

// client calls one API server, sending hdr (name, value pairs) with every request.
type client struct {
	t      *testing.T
	url    string
	client *http.Client // nil: http.DefaultClient
	hdr    []string
}

// with returns c sending hdr with every request as well.
func (c client) with(hdr ...string) client {
	c.hdr = append(append([]string(nil), c.hdr...), hdr...)
	return c
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r reply) errText(t *testing.T) string {
	t.Helper()
	var e struct{ Error string }
	r.decode(t, &e)
	return e.Error
}

// do sends method path with the headers given as name, value pairs.
func (c client) do(method, path string, headers ...string) reply {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.url+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	headers = append(append([]string(nil), c.hdr...), headers...)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return c.send(req)
}

func (c client) send(req *http.Request) reply {
	c.t.Helper()
	hc := c.client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		c.t.Fatalf("%s %s: Content-Type %q, body %s", req.Method, req.URL.Path, ct, b)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// want fails unless r has status code and, if given, a body containing each of parts.
func (c client) want(r reply, code int, parts ...string) {
	c.t.Helper()
	if r.status != code {
		c.t.Fatalf("status %d, want %d: %s", r.status, code, r.body)
	}
	for _, p := range parts {
		if !bytes.Contains(r.body, []byte(p)) {
			c.t.Fatalf("body %s does not contain %q", r.body, p)
		}
	}
}

func serve(t *testing.T, a *admin.Admin) client {
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return client{t: t, url: srv.URL}
}

var bearer = []string{"Authorization", "Bearer " + oncallToken}

func TestIntegrationAPIReads(t *testing.T) {
	w := newWorld(t)
	c := serve(t, w.newAdmin(t)).with(bearer...)

	var ov admin.Overview
	r := c.do("GET", "/api/overview")
	c.want(r, 200)
	r.decode(t, &ov)
	switch {
	case ov.Outbox == nil || ov.Outbox.Pending != 1 || ov.Outbox.Dead != 2:
		t.Fatalf("overview outbox %+v", ov.Outbox)
	case ov.FailedNotifications != 1 || ov.LastHour.FailedNotifications != 1 || ov.LastHour.DeadMessages != 2:
		t.Fatalf("overview failures %+v, failed notifications %d", ov.LastHour, ov.FailedNotifications)
	case ov.LastHour.Aborted != 2 || ov.LastHour.Refused != 1 || ov.LastHour.TimedOut != 0:
		// the cancelled tcc (its starter rolled back) and the compensated saga (its account refused)
		t.Fatalf("overview last hour %+v, want 2 aborted, 1 of them refused", ov.LastHour)
	case ov.OldestUnfinished == nil || ov.OldestUnfinished.GID != w.trying || ov.OldestUnfinished.Log != "tcc" || ov.Unfinished != 1:
		t.Fatalf("overview oldest unfinished %+v (%d unfinished), want %s", ov.OldestUnfinished, ov.Unfinished, w.trying)
	}

	page := func(query string) admin.TxPage {
		t.Helper()
		var p admin.TxPage
		r := c.do("GET", "/api/transactions"+query)
		c.want(r, 200)
		r.decode(t, &p)
		return p
	}
	gids := func(p admin.TxPage) map[string]string {
		m := map[string]string{}
		for _, x := range p.Items {
			m[x.GID] = x.Status
		}
		return m
	}
	all := page("")
	if g := gids(all); len(g) != 4 || g[w.confirmed] != "confirmed" || g[w.cancelled] != "cancelled" ||
		g[w.trying] != "trying" || g[w.compensated] != "compensated" || all.Next != "" {
		t.Fatalf("all transactions: %v, next %q", g, all.Next)
	}
	for q, want := range map[string]string{
		"?kind=saga":                    w.compensated,
		"?status=cancelled":             w.cancelled,
		"?unfinished=1":                 w.trying,
		"?kind=tcc&status=confirmed":    w.confirmed,
		"?unfinished=true&older_than=0": w.trying,
	} {
		if g := gids(page(q)); len(g) != 1 || g[want] == "" {
			t.Fatalf("%s: %v, want only %s", q, g, want)
		}
	}
	if g := gids(page("?older_than=1h")); len(g) != 0 {
		t.Fatalf("older than an hour: %v", g)
	}
	// Paging by cursor: 3 + 1, in gid order across the two logs.
	first := page("?limit=3")
	if len(first.Items) != 3 || first.Next != first.Items[2].GID {
		t.Fatalf("first page: %d items, next %q", len(first.Items), first.Next)
	}
	second := page("?limit=3&after=" + first.Next)
	if len(second.Items) != 1 || second.Items[0].GID <= first.Next || second.Next != "" {
		t.Fatalf("second page: %+v", second)
	}
	for q, msg := range map[string]string{
		"?kind=xa":              `kind \"xa\": want tcc, saga, 2pc, 3pc or workflow`,
		"?status=sleeping":      `status \"sleeping\": want one of trying`,
		"?limit=0":              `limit=\"0\": want a number from 1 to 500`,
		"?limit=501":            `limit=\"501\"`,
		"?older_than=yesterday": `older_than=\"yesterday\": want a duration`,
		"?older_than=-1m":       `older_than=\"-1m\"`,
		"?unfinished=maybe":     `unfinished=\"maybe\"`,
	} {
		c.want(c.do("GET", "/api/transactions"+q), 400, msg)
	}

	var tx admin.Transaction
	r = c.do("GET", "/api/transactions/"+w.compensated)
	c.want(r, 200)
	r.decode(t, &tx)
	if tx.Kind != "saga" || tx.Status != "compensated" || !tx.Final || len(tx.Branches) != 2 ||
		tx.Branches[0].Name != "order" || tx.Branches[0].Status != "compensated" || tx.Branches[1].Name != "account" ||
		tx.Branches[0].TargetKind != "inproc" || tx.Branches[0].Target != "order" ||
		tx.Branches[0].UpdatedAt.Before(tx.CreatedAt) || tx.Branches[0].UpdatedAt.After(tx.UpdatedAt) {
		t.Fatalf("saga detail: %+v", tx)
	}
	r = c.do("GET", "/api/transactions/"+w.trying)
	c.want(r, 200)
	r.decode(t, &tx)
	if tx.Kind != "tcc" || tx.Status != "trying" || len(tx.Branches) != 1 || tx.Branches[0].Status != "pending" ||
		tx.Branches[0].Payload == nil || tx.Branches[0].Payload.Size != len(`{"sku":"<b>x</b>"}`) {
		t.Fatalf("tcc detail: %+v", tx)
	}
	c.want(c.do("GET", "/api/transactions/no-such-gid"), 404, `transaction \"no-such-gid\": not found`)

	var ob admin.OutboxState
	r = c.do("GET", "/api/outbox")
	c.want(r, 200)
	r.decode(t, &ob)
	if ob.Pending != 1 || ob.Dead != 2 || ob.OldestPending <= 0 || ob.Table != w.s.Name+".txkit_outbox" {
		t.Fatalf("outbox: %+v", ob)
	}
	var dead []admin.DeadMessage
	r = c.do("GET", "/api/outbox/dead")
	c.want(r, 200, "broker refused: topic not allowed")
	r.decode(t, &dead)
	if len(dead) != 2 || dead[0].ID != w.dead[0] || dead[1].ID != w.dead[1] || dead[0].Attempts != 1 || dead[0].Key != "order-a" {
		t.Fatalf("dead: %+v", dead)
	}
	r = c.do("GET", "/api/outbox/dead?limit=1&after="+w.dead[0].String())
	c.want(r, 200)
	r.decode(t, &dead)
	if len(dead) != 1 || dead[0].ID != w.dead[1] {
		t.Fatalf("dead after the first: %+v", dead)
	}
	c.want(c.do("GET", "/api/outbox/dead?after=nope"), 400, `after \"nope\": not a UUID`)
	c.want(c.do("GET", "/api/outbox/dead?after="+uuid.NewString()), 404, "no such message")
	c.want(c.do("GET", "/api/outbox/dead?limit=x"), 400, "limit")

	var ns []admin.Notification
	r = c.do("GET", "/api/notifications/failed")
	c.want(r, 200)
	r.decode(t, &ns)
	if len(ns) != 1 || ns[0].ID != w.failed || ns[0].Status != "failed" || ns[0].LastStatusCode != 503 {
		t.Fatalf("failed notifications: %+v", ns)
	}
	var n admin.Notification
	r = c.do("GET", "/api/notifications/"+w.failed.String())
	c.want(r, 200)
	r.decode(t, &n)
	if n.Key != "order-1" || n.Payload.Size != len(`{"paid":true}`) || len(n.Tries) != 1 || n.Tries[0].StatusCode != 503 {
		t.Fatalf("notification: %+v", n)
	}
	c.want(c.do("GET", "/api/notifications/"+uuid.NewString()), 404, "not found")
	c.want(c.do("GET", "/api/notifications/42"), 400, `notification id \"42\": not a UUID`)

	// Leaders and locks without any configured: empty lists.
	c.want(c.do("GET", "/api/leaders"), 200, "[]")
	c.want(c.do("GET", "/api/locks"), 200, "[]")
	// The mux's own 404 and 405, as JSON.
	c.want(c.do("GET", "/api/nothing-here"), 404, "no such API route")
	c.want(c.do("DELETE", "/api/outbox"), 405, "method not allowed")
	c.want(c.do("GET", "/api/outbox/dead/"+w.dead[0].String()+"/requeue"), 405, "POST")
}

func TestIntegrationAPIMutations(t *testing.T) {
	w := newWorld(t)
	a := w.newAdmin(t)
	c := serve(t, a)
	requeue := func(id uuid.UUID) string { return "/api/outbox/dead/" + id.String() + "/requeue" }
	redeliver := func(id uuid.UUID) string { return "/api/notifications/" + id.String() + "/redeliver" }

	// No credentials, wrong ones, another scheme: 401, nothing done.
	c.want(c.do("POST", requeue(w.dead[0])), 401, "no credentials")
	c.want(c.do("POST", requeue(w.dead[0]), "Authorization", "Bearer wrong-token-0123456789"), 401, "bearer token not accepted")
	c.want(c.do("POST", requeue(w.dead[0]), "Authorization", "Basic b25jYWxsOng="), 401, "Bearer")
	c.want(c.do("POST", redeliver(w.failed)), 401)

	// A requeue with an Idempotency-Key, and its repeat: the first answer, replayed.
	k := append(bearer, "Idempotency-Key", "requeue-1")
	first := c.do("POST", requeue(w.dead[0]), k...)
	c.want(first, 200, `"result":"ok"`)
	again := c.do("POST", requeue(w.dead[0]), k...)
	c.want(again, 200)
	if again.header.Get("Idempotent-Replay") != "true" || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay: header %q, body %s, first %s", again.header.Get("Idempotent-Replay"), again.body, first.body)
	}
	// Without the key the repeat is a conflict: the message is pending now.
	c.want(c.do("POST", requeue(w.dead[0]), bearer...), 409, "is pending, not dead")
	c.want(c.do("POST", requeue(w.pending), bearer...), 409, "message "+w.pending.String()+" is pending, not dead")
	c.want(c.do("POST", requeue(uuid.New()), bearer...), 404, "not found")
	c.want(c.do("POST", "/api/outbox/dead/xyz/requeue", bearer...), 400, `message id \"xyz\": not a UUID`)
	c.want(c.do("POST", "/api/outbox/dead/%ff%00/requeue", bearer...), 400, "not a UUID")
	c.want(c.do("POST", requeue(w.dead[1]), append(bearer, "Idempotency-Key", strings.Repeat("k", 256))...), 400, "Idempotency-Key: 256 bytes")
	// The key of the first requeue, for another message: refused.
	c.want(c.do("POST", requeue(w.dead[1]), k...), 409, `Idempotency-Key \"requeue-1\" was used for outbox.requeue`)

	var ob admin.OutboxState
	r := c.do("GET", "/api/outbox", bearer...)
	r.decode(t, &ob)
	if ob.Pending != 2 || ob.Dead != 1 {
		t.Fatalf("after one requeue: %+v", ob)
	}

	// Redeliver: once, then a conflict (pending, not failed); unknown: 404. A refusal replayed.
	c.want(c.do("POST", redeliver(w.failed), bearer...), 200)
	c.want(c.do("POST", redeliver(w.failed), bearer...), 409, "is pending, not failed")
	k2 := append(bearer, "Idempotency-Key", "redeliver-unknown")
	unknown := uuid.New()
	c.want(c.do("POST", redeliver(unknown), k2...), 404)
	rep := c.do("POST", redeliver(unknown), k2...)
	c.want(rep, 404, "not found")
	if rep.header.Get("Idempotent-Replay") != "true" {
		t.Fatalf("replayed refusal without Idempotent-Replay: %v", rep.header)
	}

	// The audit table has every call of an actor, refused ones included, newest first.
	entries, err := a.Audit(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range entries {
		count[e.Actor+" "+e.Action+" "+e.Result]++
		if e.Remote == "" || e.Status == 0 || e.At.IsZero() {
			t.Fatalf("audit entry without remote, status or time: %+v", e)
		}
	}
	for key, n := range map[string]int{
		" outbox.requeue unauthorized":      0, // refused before an actor is known: counted, not recorded
		" notify.redeliver unauthorized":    0,
		"oncall outbox.requeue ok":          1, // the replay is not a second row
		"oncall outbox.requeue conflict":    3, // the repeat, the pending one, the reused key
		"oncall outbox.requeue not_found":   1,
		"oncall outbox.requeue bad_request": 3,
		"oncall notify.redeliver ok":        1,
		"oncall notify.redeliver conflict":  1,
		"oncall notify.redeliver not_found": 1,
	} {
		if count[key] != n {
			t.Errorf("audit: %d rows %q, want %d (all: %v)", count[key], key, n, count)
		}
	}
	if e := entries[len(entries)-1]; e.Action != admin.ActionRequeue || e.Result != admin.ResultOK || e.Actor != "oncall" {
		t.Fatalf("oldest audit entry: %+v", e)
	}
	var listed []admin.AuditEntry
	r = c.do("GET", "/api/audit?limit=2", bearer...)
	c.want(r, 200)
	r.decode(t, &listed)
	if len(listed) != 2 || listed[0].ID != entries[0].ID {
		t.Fatalf("GET /api/audit?limit=2: %+v", listed)
	}

	// The Go API answers with the sentinels.
	ctx := t.Context()
	if err := a.Requeue(ctx, "script", w.pending); !errors.Is(err, admin.ErrConflict) {
		t.Fatalf("Requeue of a pending message = %v, want ErrConflict", err)
	}
	if err := a.Redeliver(ctx, "script", uuid.New()); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("Redeliver unknown = %v, want ErrNotFound", err)
	}
	if _, err := a.Transaction(ctx, "nope"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("Transaction unknown = %v, want ErrNotFound", err)
	}
	if _, err := a.Transactions(ctx, admin.TxFilter{Limit: -1}); !errors.Is(err, admin.ErrBadRequest) {
		t.Fatalf("Transactions limit -1 = %v, want ErrBadRequest", err)
	}
	if n, err := a.RequeueAll(ctx, "script"); err != nil || n != 1 {
		t.Fatalf("RequeueAll = %d, %v; want the one dead message left", n, err)
	}
}

// A request signed with an actor's HMAC secret acts as that actor; a bad signature or a stale
// timestamp is refused. An Admin without credentials refuses every call.
func TestIntegrationAPIHMACAndReadOnly(t *testing.T) {
	w := newWorld(t)
	const secret = "robot-secret-0123456789"
	c := serve(t, w.newAdmin(t, admin.WithHMACSecrets("robot", secret)))
	signed := func(id uuid.UUID, secret string, at time.Time) reply {
		req, err := http.NewRequestWithContext(t.Context(), "POST", c.url+"/api/outbox/dead/"+id.String()+"/requeue", nil)
		if err != nil {
			t.Fatal(err)
		}
		signing.SignRequest(req, secret, at, nil)
		return c.send(req)
	}
	c.want(signed(w.dead[0], "another-secret-0123456789", time.Now()), 401, "signature does not verify")
	c.want(signed(w.dead[0], secret, time.Now().Add(-time.Hour)), 401, "timestamp")
	now := time.Now()
	c.want(signed(w.dead[0], secret, now), 200)
	// The same signed request again (a replay): the first answer, not a second requeue.
	if r := signed(w.dead[0], secret, now); r.status != 200 || r.header.Get("Idempotent-Replay") != "true" {
		t.Fatalf("replayed signed request: %d %v %s", r.status, r.header, r.body)
	}
	// Signed later, it is a new request: the message is pending now.
	c.want(signed(w.dead[0], secret, now.Add(time.Second)), 409, "is pending, not dead")

	ro, err := admin.New(w.s.Pool, admin.WithSchema(w.s.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !ro.ReadOnly() {
		t.Fatal("an Admin without credentials is not read-only")
	}
	rc := serve(t, ro)
	rc.want(rc.do("POST", "/api/outbox/dead/"+w.dead[1].String()+"/requeue", bearer...), 401, "read-only")
	rc.want(rc.do("GET", "/api/outbox"), 401, "no credentials")
	// A signed GET reads.
	req, err := http.NewRequestWithContext(t.Context(), "GET", c.url+"/api/outbox", nil)
	if err != nil {
		t.Fatal(err)
	}
	signing.SignRequest(req, secret, time.Now(), nil)
	c.want(c.send(req), 200, `"dead":1`)
}

// A 500 names a request id and not the internal error (here: a table that does not exist).
func TestIntegrationAPIInternalError(t *testing.T) {
	w := newWorld(t)
	c := serve(t, w.newAdmin(t, admin.WithTables(admin.Tables{Outbox: "no_such_table"}))).with(bearer...)
	r := c.do("GET", "/api/outbox")
	c.want(r, 500, "internal error (request id ")
	if msg := r.errText(t); strings.Contains(msg, "no_such_table") || strings.Contains(msg, "does not exist") {
		t.Fatalf("500 leaks the internal error: %q", msg)
	}
	// The overview treats the missing table as no outbox.
	var ov admin.Overview
	r = c.do("GET", "/api/overview")
	c.want(r, 200)
	r.decode(t, &ov)
	if ov.Outbox != nil {
		t.Fatalf("overview of a missing outbox table: %+v", ov.Outbox)
	}
}
