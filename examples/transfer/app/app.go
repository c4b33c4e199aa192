// Package app holds what the transfer example's bank service and demo share: configuration from
// the environment, logging, databases and schemas of the run's own, serving HTTP, and the body of
// a transfer. (The tcc-order example has its own copy of the generic parts: examples do not import
// each other.)
package app

// DefaultPG is the PostgreSQL URL of `make up`, used when TXKIT_PG_URL is unset.
const DefaultPG = "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"

// DefaultZK is the ZooKeeper ensemble of `make up`, used when TXKIT_ZK is unset.
const DefaultZK = "127.0.0.1:22181,127.0.0.1:22182,127.0.0.1:22183"

// The two banks' databases (created if missing); each run works in a schema of its own in both.
// The coordinators' log lives in the run's schema of East.
const (
	East = "txkit_east"
	West = "txkit_west"
)

// Transfer is the body of POST /transfers: Amount leaves From's account in the east database and
// arrives in To's account in the west database. GID is optional (default: a new UUIDv7); the demo
// sets it so that it can follow a transfer whose answer it never got.
type Transfer struct {
	GID    string `json:"gid,omitempty"`
	From   string `json:"from"`
	To     string `json:"to"`
	Amount int64  `json:"amount"`
}

// Answer is the body of every answer to POST /transfers. Status is "committed" (200), "refused"
// (409: insufficient funds), "aborted" (409: phase one failed; 503: a side's work failed
// otherwise), "rejected" (404: no such account; 400: bad body or gid) or "unknown" (500: the
// outcome is the leader's to settle). Error is a short message: what is wrong with the request
// (4xx), or what failed, with RequestID naming the bank's log line that has the detail.
type Answer struct {
	GID       string `json:"gid,omitempty"`
	Status    string `json:"status"`
	Error     string `json:"error,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}
