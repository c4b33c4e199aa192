// Package admin is the operator's view of txkit's tables: global transactions with their branches,
// the outbox's backlog and dead messages, failed notifications, the leaders of elections and the
// holders of locks — and the operator's few actions on them: requeue a dead message, redeliver a
// failed notification. Its [Admin] methods are the one implementation of each query: the JSON API
// ([Admin.Handler]), the web console (package admin/console) and the txkit command (`txkit tx`,
// `txkit outbox`, `txkit notify`, `txkit serve`) all call them.
//
// A recipe: an Admin on the service's pool, with a token for the on-call engineer and the
// ZooKeeper election of the tcc coordinator, served on loopback (reached as localhost or
// 127.0.0.1; [WithAllowedHosts] names others).
//
//	a, err := admin.New(pool,
//		admin.WithTokens(map[string]string{"oncall": token}),
//		admin.WithElections(admin.Election{Name: "tcc recovery", Path: "/txkit/tcc/leader", Inspector: sess.Inspector()}))
//	if err != nil { return err }
//	if err := a.Migrate(ctx); err != nil { return err } // the audit table
//	go a.Run(ctx) // purges audit rows past their retention; returns when ctx ends
//	srv := &http.Server{Addr: "127.0.0.1:8089", Handler: a.Handler()}
//
// # The JSON API
//
//	method  path                                  answer
//	GET     /api/overview                         Overview: leaders, backlog, oldest unfinished, last hour's failures, figures
//	GET     /api/transactions?kind=&status=&unfinished=1&older_than=10m&after=&limit=
//	                                              TxPage: {items, next}; next is the after= of the next page
//	GET     /api/transactions/{gid}               Transaction with its branches; 404 for an unknown gid
//	POST    /api/transactions/{gid}/reveal        the same with the payloads' values; audited
//	GET     /api/outbox                           OutboxState: pending, dead, oldest pending age
//	GET     /api/outbox/dead?limit=&after=        []DeadMessage, oldest first; after= is a message id
//	POST    /api/outbox/dead/{id}/requeue         requeue a dead message; 409 when it is not dead
//	POST    /api/outbox/{id}/reveal               a message with its body's and headers' values; audited
//	GET     /api/notifications/failed?limit=      []Notification that ran out of attempts
//	GET     /api/notifications/{id}               Notification with its attempts (tries)
//	POST    /api/notifications/{id}/redeliver     put a failed notification back on its schedule; 409 when not failed
//	POST    /api/notifications/{id}/reveal        the notification with its payload's value; audited
//	GET     /api/leaders                          []Leader: each election's leader and fencing token
//	GET     /api/locks                            []LockState: each lock's holder and waiters
//	GET     /api/audit?limit=                     []AuditEntry, newest first
//
// Errors are {"error": "..."} with 400 (a bad filter, limit or id; the text says what is wrong),
// 401 (a call without valid credentials), 404, 405, 409, 421 (a Host that is not this server's),
// 429 (too many POSTs from one address, with Retry-After) or 500. A 500's body names a request id
// and never the internal error, which is logged with that id.
//
// # Safety
//
// Every call needs a credential. A request whose Host is not a loopback name or one of
// [WithAllowedHosts] is answered 421, so that a web page whose DNS name is rebound to this
// server's address cannot read it. GET calls take a read credential ([Admin.ReadActor]): a bearer
// token of [WithReadTokens] or [WithTokens], an HMAC signature, or the console's session cookie
// ([Admin.Login]). What rows carry for others — transaction and branch payloads, outbox bodies
// and header values, notification payloads — is redacted to its size and SHA-256 ([Secret]); the
// reveal calls show it and are recorded in the audit table like an action. POST calls need "Authorization: Bearer <token>" ([WithTokens]) or an HMAC signature made as
// txkit's participant requests are signed ([WithHMACSecrets]); without either configured the API
// refuses every action ([Admin.ReadOnly]) and every reveal. A token or secret names one actor, and
// no token or HMAC actor may be named like the txkit command's ("cli:..."): [New] refuses both. A
// POST with an "Idempotency-Key" header is done once: a repeat answers what the first answered,
// with "Idempotent-Replay: true". A signature covers the Idempotency-Key, and is claimed as a nonce
// (its SHA-256 is kept, never the signature): the same signed request again gets the first answer,
// and one with another key does not verify. Without a key, a repeat of a done requeue is refused
// with 409 (the message is pending now) and has no second effect. Every POST of an authenticated
// actor — refused ones too — is recorded in the audit table (actor, time, action, target, result,
// remote address); a POST refused before (no or bad credentials, a read-only Admin) is counted in
// txkit_admin_refused_total ([WithRegisterer]) and logged at most every 10 s, never written to the
// table. POSTs are limited per client address ([WithRateLimit]; 429 past it). [Admin.Run] purges
// audit rows older than [WithAuditRetention] (30 days); [Admin.PurgeAudit] and `txkit audit purge`
// do one pass. No SQL is built from request text: table names come from options, checked by
// [New] with the owning packages' checks, and every value is a bind parameter. GET calls change
// nothing; request bodies are bounded.
package admin
