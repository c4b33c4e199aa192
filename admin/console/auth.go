package console

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/txkit/txkit/admin"
)

// loginData is the sign-in page's data.
type loginData struct {
	Next    string // the page to go to once signed in
	Message string // why the last attempt failed
}

// maxLoginBody bounds a sign-in form.
const maxLoginBody = 4 << 10

// guard answers a request whose Host is not the admin's (admin.Admin.AllowedHost) 421, a
// cross-origin POST 403, and a page asked for without a read credential (the session cookie of
// POST /login, or a bearer token) 401 with the sign-in form; it passes the rest to h. The sign-in
// and sign-out routes and the static files need no credential.
func (c *console) guard(h http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.a.AllowedHost(r.Host) {
			http.Error(w, "misdirected request", http.StatusMisdirectedRequest)
			return
		}
		if err := cop.Check(r); err != nil {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		if r.URL.Path == "/login" || r.URL.Path == "/logout" || strings.HasPrefix(r.URL.Path, "/static/") {
			h.ServeHTTP(w, r)
			return
		}
		if _, err := c.a.ReadActor(r); err != nil {
			msg := ""
			if _, cerr := r.Cookie(admin.SessionCookie); cerr == nil {
				msg = "Your session has ended: sign in again."
			}
			c.render(w, r, http.StatusUnauthorized, "login", "", "Sign in", loginData{Next: r.URL.RequestURI(), Message: msg})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// login checks the token of the sign-in form and answers a session cookie and a redirect to the
// page asked for, or the form again with 401.
func (c *console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	next := localPath(r.PostFormValue("next"))
	cookie, actor, err := c.a.Login(strings.TrimSpace(r.PostFormValue("token")))
	if err != nil {
		msg := "That token is not accepted."
		if !errors.Is(err, admin.ErrUnauthorized) {
			msg = "The sign-in form could not be read."
		}
		c.render(w, r, http.StatusUnauthorized, "login", "", "Sign in", loginData{Next: next, Message: msg})
		return
	}
	cookie.Secure = r.TLS != nil
	http.SetCookie(w, cookie)
	c.o.log.Info("console: signed in", "actor", actor, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout drops the session cookie.
func (c *console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: admin.SessionCookie, Value: "", Path: "/", MaxAge: -1, Expires: time.Unix(0, 0),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// localPath is p when it is a path of this site ("/outbox?after=…"), else "/": a sign-in never
// sends the browser to another site.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n") {
		return "/"
	}
	return p
}
