// Package console is txkit's operator web console: server-rendered pages over an [admin.Admin] —
// an overview (leaders, outbox backlog, failed notifications, the oldest unfinished transaction,
// failures in the last hour, Prometheus figures), the transactions with filters and each one's
// branch timeline, the outbox's dead messages with a Requeue button, the failed notifications with
// a Redeliver button, the leaders and locks, and the audit of actions taken.
//
// The pages are html/template files and one stylesheet and one small script, embedded in the
// binary: there is no Node build step and nothing to install. The operator signs in once, with a
// token of admin.WithTokens: the server keeps a session cookie for the
// pages ([admin.Admin.Login]) and the tab keeps the token in its sessionStorage for the buttons.
// Without a session every page answers the sign-in form (401); a foreign Host is answered 421.
// The pages only read, and show payloads, bodies and header values redacted; the buttons
// (Requeue, Redeliver, Reveal) ask for a confirmation and call the admin JSON API
// ([admin.Admin.Handler]) with the operator's bearer token. The API checks the token and records
// the call. Every value read from the database is escaped, and the pages are served with a
// Content-Security-Policy that allows no inline script.
//
// The recipe: one mux with the API under /api/ and the console at "/", on loopback (`txkit serve`
// does this):
//
//	a, err := admin.New(pool, admin.WithSchema("orders"), admin.WithTokens(map[string]string{"alice": token}, nil))
//	if err != nil {
//		return err
//	}
//	pages, err := console.Handler(a, console.WithRefresh(10*time.Second))
//	if err != nil {
//		return err
//	}
//	mux := http.NewServeMux()
//	mux.Handle("/api/", a.Handler())
//	mux.Handle("/", pages)
//	return http.ListenAndServe("127.0.0.1:8089", mux)
package console
