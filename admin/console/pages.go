package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/admin"
)

// listLimit is how many rows a list page shows at once.
const listLimit = 50

func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	ov, err := c.a.Overview(r.Context())
	if err != nil {
		c.failQuery(w, r, "overview", err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", "overview", "Overview", ov)
}

// txList is the transactions page's data.
type txList struct {
	Filter     txForm
	Page       admin.TxPage
	NextURL    string // the next page's link, "" on the last page
	Kinds      []string
	Statuses   []string
	BadRequest string
}

// txForm is the filter form as the operator typed it (shown back in the form).
type txForm struct {
	Kind, Status, OlderThan, After, Limit string
	Unfinished                            bool
}

func (c *console) transactions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	form := txForm{Kind: q.Get("kind"), Status: q.Get("status"), OlderThan: q.Get("older_than"), After: q.Get("after"),
		Limit: q.Get("limit"), Unfinished: q.Get("unfinished") != ""}
	f := admin.TxFilter{Kind: form.Kind, Status: form.Status, Unfinished: form.Unfinished, After: form.After, Limit: listLimit}
	if form.OlderThan != "" {
		d, err := time.ParseDuration(form.OlderThan)
		if err != nil || d < 0 {
			c.fail(w, r, http.StatusBadRequest, "older than "+strconv.Quote(form.OlderThan)+": want a duration like 90s, 10m or 2h", nil)
			return
		}
		f.OlderThan = d
	}
	if form.Limit != "" {
		n, err := strconv.Atoi(form.Limit)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, "limit "+strconv.Quote(form.Limit)+": want a whole number", nil)
			return
		}
		f.Limit = n
	}
	page, err := c.a.Transactions(r.Context(), f)
	if err != nil {
		c.failQuery(w, r, "transactions", err)
		return
	}
	d := txList{Filter: form, Page: page,
		Kinds:    []string{"tcc", "saga", "2pc", "3pc", "workflow"},
		Statuses: []string{"trying", "voting", "confirming", "confirmed", "cancelling", "cancelled", "running", "compensating", "compensated", "succeeded"}}
	if page.Next != "" {
		next := url.Values{}
		for k, v := range map[string]string{"kind": form.Kind, "status": form.Status, "older_than": form.OlderThan, "limit": form.Limit} {
			if v != "" {
				next.Set(k, v)
			}
		}
		if form.Unfinished {
			next.Set("unfinished", "1")
		}
		next.Set("after", page.Next)
		d.NextURL = "/transactions?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "transactions", "transactions", "Transactions", d)
}

func (c *console) transaction(w http.ResponseWriter, r *http.Request) {
	gid := r.PathValue("gid")
	t, err := c.a.Transaction(r.Context(), gid)
	if err != nil {
		c.failQuery(w, r, "transaction "+strconv.Quote(gid), err)
		return
	}
	c.render(w, r, http.StatusOK, "transaction", "transactions", "Transaction "+gid, t)
}

// outboxPage is the outbox page's data.
type outboxPage struct {
	State   admin.OutboxState
	Dead    []admin.DeadMessage
	NextURL string
}

func (c *console) outbox(w http.ResponseWriter, r *http.Request) {
	var after uuid.UUID
	if s := r.URL.Query().Get("after"); s != "" {
		id, err := uuid.Parse(s)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, "after "+strconv.Quote(s)+": want a message id (a UUID)", nil)
			return
		}
		after = id
	}
	st, err := c.a.Outbox(r.Context())
	if err != nil {
		c.failQuery(w, r, "outbox", err)
		return
	}
	dead, err := c.a.DeadMessages(r.Context(), listLimit, after)
	if err != nil {
		c.failQuery(w, r, "dead messages", err)
		return
	}
	d := outboxPage{State: st, Dead: dead}
	if len(dead) == listLimit {
		d.NextURL = "/outbox?after=" + dead[len(dead)-1].ID.String()
	}
	c.render(w, r, http.StatusOK, "outbox", "outbox", "Outbox", d)
}

func (c *console) notifications(w http.ResponseWriter, r *http.Request) {
	ns, err := c.a.FailedNotifications(r.Context(), listLimit)
	if err != nil {
		c.failQuery(w, r, "failed notifications", err)
		return
	}
	c.render(w, r, http.StatusOK, "notifications", "notifications", "Notifications", ns)
}

func (c *console) notification(w http.ResponseWriter, r *http.Request) {
	s := r.PathValue("id")
	id, err := uuid.Parse(s)
	if err != nil {
		c.fail(w, r, http.StatusNotFound, "notification "+strconv.Quote(s)+": not found (ids are UUIDs)", nil)
		return
	}
	n, err := c.a.Notification(r.Context(), id)
	if err != nil {
		c.failQuery(w, r, "notification "+id.String(), err)
		return
	}
	c.render(w, r, http.StatusOK, "notification", "notifications", "Notification "+id.String(), n)
}

// leadersPage is the leaders page's data.
type leadersPage struct {
	Leaders []admin.Leader
	Locks   []admin.LockState
}

func (c *console) leaders(w http.ResponseWriter, r *http.Request) {
	ls, err := c.a.Leaders(r.Context())
	if err != nil {
		c.failQuery(w, r, "leaders", err)
		return
	}
	locks, err := c.a.Locks(r.Context())
	if err != nil {
		c.failQuery(w, r, "locks", err)
		return
	}
	c.render(w, r, http.StatusOK, "leaders", "leaders", "Leaders and locks", leadersPage{Leaders: ls, Locks: locks})
}

func (c *console) audit(w http.ResponseWriter, r *http.Request) {
	es, err := c.a.Audit(r.Context(), 100)
	if err != nil {
		c.failQuery(w, r, "audit", err)
		return
	}
	c.render(w, r, http.StatusOK, "audit", "audit", "Audit", es)
}

// funcs are the templates' helpers. None builds markup: html/template escapes what they return.
var funcs = map[string]any{
	// ts formats t in UTC to the second, "" for the zero time.
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	// ago says how long before now t was ("3m12s ago"), "" for the zero time.
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return age(time.Since(t)) + " ago"
	},
	"age": age,
	// dur rounds a latency for display: 802µs, 2.9ms, 1.25s.
	"dur": func(d time.Duration) string {
		switch {
		case d < time.Millisecond:
			return d.Round(time.Microsecond).String()
		case d < time.Second:
			return d.Round(100 * time.Microsecond).String()
		default:
			return d.Round(10 * time.Millisecond).String()
		}
	},
	// short cuts s to n characters (runes), with an ellipsis when it cut.
	"short": func(n int, s string) string {
		rs := []rune(s)
		if len(rs) <= n {
			return s
		}
		return string(rs[:n]) + "…"
	},
	// redacted describes a value the page does not show: "27 bytes · sha256 3f2a9c1d…".
	"redacted": func(s admin.Secret) string {
		return strconv.Itoa(s.Size) + " bytes · sha256 " + s.SHA256[:min(12, len(s.SHA256))] + "…"
	},
	// hasPayload reports whether a transaction or one of its branches has a payload to reveal.
	"hasPayload": func(t *admin.Transaction) bool {
		if t.Payload != nil {
			return true
		}
		for _, b := range t.Branches {
			if b.Payload != nil {
				return true
			}
		}
		return false
	},
	// tone is the CSS class of a status: good (finished as asked), undone (rolled back), bad
	// (dead, failed), busy (under way).
	"tone": func(s any) string {
		switch strings.ToLower(toString(s)) {
		case "confirmed", "succeeded", "done", "delivered", "published", "sent", "committed", "ok":
			return "good"
		case "cancelled", "compensated", "aborted", "rolled back", "rolledback":
			return "undone"
		case "dead", "failed", "error", "refused":
			return "bad"
		default:
			return "busy"
		}
	},
	"pathesc": url.PathEscape,
	// cause says why a transaction rolled back (admin.Transaction.AbortCause).
	"cause": func(c string) string {
		switch c {
		case admin.CauseRefused:
			return "refused by a participant"
		case admin.CauseTimeout:
			return "timed out"
		}
		return c
	},
	// minus is a less the bs.
	"minus": func(a int64, bs ...int64) int64 {
		for _, b := range bs {
			a -= b
		}
		return a
	},
}

// age formats d rounded to a readable unit ("45s", "3m12s", "2h05m", "3d4h").
func age(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Minute:
		return strconv.Itoa(int(d.Round(time.Second)/time.Second)) + "s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return strconv.Itoa(int(d/time.Minute)) + "m" + pad(int(d%time.Minute/time.Second)) + "s"
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return strconv.Itoa(int(d/time.Hour)) + "h" + pad(int(d%time.Hour/time.Minute)) + "m"
	default:
		d = d.Round(time.Hour)
		return strconv.Itoa(int(d/(24*time.Hour))) + "d" + strconv.Itoa(int(d%(24*time.Hour)/time.Hour)) + "h"
	}
}

func pad(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

func toString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case interface{ String() string }:
		return s.String()
	default:
		return ""
	}
}
