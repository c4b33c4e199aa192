package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/httpsafe"
)

//go:embed templates/*.html static/*
var assets embed.FS

// The pages, each a template file in templates/ executed inside layout.html.
var pageNames = []string{"overview", "transactions", "transaction", "outbox", "notifications", "notification", "leaders", "audit", "error", "login"}

// csp allows nothing but this origin's own files: no inline script or style, so markup that got
// into a page by mistake could not run even if escaping failed.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// console serves the pages of one [admin.Admin].
type console struct {
	a     *admin.Admin
	o     options
	pages map[string]*template.Template
}

// Handler returns the console's web pages over a (overview, transactions, outbox, notifications,
// leaders, audit, the sign-in form), for a mux that also serves a.Handler(), whose API the pages'
// buttons call: mount it at "/". The pages and what each shows: docs/console.md ("Console").
//
// Every page needs a read credential (the session cookie of /login, or a bearer token) and
// answers the sign-in form with 401 without one; a foreign Host is answered 421
// (admin.Admin.AllowedHost), a cross-origin POST 403. Pages are read-only GETs rendered with
// html/template (everything from the database escaped) under a Content-Security-Policy that
// forbids inline script; payloads, bodies and header values show redacted until a Reveal button
// asks the API. A failed query is answered 500 with a request id, the error logged under it; an
// unknown gid or id is 404; a bad filter is 400 saying what is wrong.
//
// Handler returns an error wrapping [ErrInvalidOption] when a is nil or an option is unusable.
// The handler is safe for concurrent use; each request's context bounds its queries.
func Handler(a *admin.Admin, opts ...Option) (http.Handler, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if a == nil {
		return nil, fmt.Errorf("console: nil admin: %w", ErrInvalidOption)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := &console{a: a, o: o, pages: map[string]*template.Template{}}
	for _, p := range pageNames {
		t, err := template.New(p).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		c.pages[p] = t
	}
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, fmt.Errorf("console: assets: %w", err)
	}
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /transactions", c.transactions)
	mux.HandleFunc("GET /transactions/{gid...}", c.transaction)
	mux.HandleFunc("GET /outbox", c.outbox)
	mux.HandleFunc("GET /notifications", c.notifications)
	mux.HandleFunc("GET /notifications/{id}", c.notification)
	mux.HandleFunc("GET /leaders", c.leaders)
	mux.HandleFunc("GET /audit", c.audit)
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusOK, "login", "", "Sign in", loginData{Next: localPath(r.URL.Query().Get("next"))})
	})
	mux.HandleFunc("POST /login", c.login)
	mux.HandleFunc("POST /logout", c.logout)
	mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // no directory listings
			c.fail(w, r, http.StatusNotFound, "no such page", nil)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "no such page", nil)
	})
	return secure(c.guard(mux)), nil
}

// secure sets the headers every answer carries.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

// view is what every page's template gets.
type view struct {
	Title   string // the console's title
	Page    string // the page's own title
	Nav     string // which navigation entry is current
	Refresh int    // seconds between reloads, 0 for none
	Now     time.Time
	Data    any
	Error   string // an error page's message
	Code    int    // an error page's status
	// ReadOnly: the Admin has no credentials, so the API refuses every action; the buttons are
	// disabled and the header says so.
	ReadOnly bool
	SignedIn bool // the page is shown to a signed-in reader: the header offers to sign out
}

// render executes page with data into a buffer, then writes it: a template that fails answers 500
// instead of half a page.
func (c *console) render(w http.ResponseWriter, r *http.Request, code int, page, nav, title string, data any) {
	v := view{Title: consoleTitle, Page: title, Nav: nav, Refresh: int(c.o.refresh / time.Second), Now: time.Now().UTC(), Data: data,
		ReadOnly: c.a.ReadOnly()}
	if page == "error" || page == "login" {
		v.Refresh = 0
	}
	v.SignedIn = page != "login"
	if e, ok := data.(errorData); ok {
		v.Error, v.Code = e.Message, code
	}
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, "layout", v); err != nil {
		httpsafe.Error(w, c.o.log, http.StatusInternalServerError, "console: page failed", err, slog.String("page", page))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

type errorData struct{ Message string }

// fail answers an error page: msg for 400 and 404 (texts that say what is wrong with the request),
// for 500 a short message with a request id, err logged under it.
func (c *console) fail(w http.ResponseWriter, r *http.Request, code int, msg string, err error) {
	if code >= 500 {
		id := httpsafe.Log(c.o.log, "console: "+msg, err, slog.String("path", r.URL.Path))
		msg = msg + " (request id " + id + ")"
	}
	c.render(w, r, code, "error", "", http.StatusText(code), errorData{Message: msg})
}

// failQuery answers the error of an admin query: 404 for [admin.ErrNotFound], 400 with its text
// for [admin.ErrBadRequest], 500 otherwise.
func (c *console) failQuery(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case errors.Is(err, admin.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, what+": not found", nil)
	case errors.Is(err, admin.ErrBadRequest):
		c.fail(w, r, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "admin: "), nil)
	default:
		c.fail(w, r, http.StatusInternalServerError, what+" failed", err)
	}
}
