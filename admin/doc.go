// Package admin is the operator's view of txkit's tables: global transactions with their branches,
// the outbox's backlog and dead messages, failed notifications, the leaders of elections and the
// holders of locks — and the operator's few actions on them: requeue a dead message, redeliver a
// failed notification. Its [Admin] methods are the one implementation of each query: the JSON API
// ([Admin.Handler]), the web console (package admin/console) and the txkit command (`txkit tx`,
// `txkit outbox`, `txkit notify`, `txkit serve`) all call them.
//
// Every call needs a credential, reads included; a foreign Host is refused; payloads are redacted
// until an audited reveal; every action needs a token that may act (or an HMAC signature), may
// carry an Idempotency-Key, and is recorded in the audit table.
//
// An Admin on the service's pool, with a token for the on-call engineer and the ZooKeeper
// election of the tcc coordinator, served on loopback ([WithAllowedHosts] names other hosts):
//
//	a, err := admin.New(pool,
//		admin.WithTokens(map[string]string{"oncall": token}, nil),
//		admin.WithInspected([]admin.Election{{Name: "tcc recovery", Path: "/txkit/tcc/leader", Inspector: sess.Inspector()}}, nil))
//	if err != nil { return err }
//	if err := a.Migrate(ctx); err != nil { return err } // the audit table
//	go a.Run(ctx) // purges audit rows past their retention; returns when ctx ends
//	srv := &http.Server{Addr: "127.0.0.1:8089", Handler: a.Handler()}
//
// The API's routes and answers, credentials, redaction, idempotency, the audit and its retention:
// docs/console.md and docs/security.md.
package admin
