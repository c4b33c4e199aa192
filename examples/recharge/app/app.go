// Package app holds what the recharge example's two services and its demo share: the defaults,
// the databases, and the JSON bodies that go between them.
package app

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultPG is the PostgreSQL URL of `make up`, used when TXKIT_PG_URL is unset.
const DefaultPG = "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"

// DefaultZK is the ZooKeeper ensemble of `make up`, used when TXKIT_ZK is unset.
const DefaultZK = "127.0.0.1:22181,127.0.0.1:22182,127.0.0.1:22183"

// Each service has a database of its own (created if missing); a run works in a schema of its
// own in each.
const (
	AccountDB  = "txkit_account_rc"
	RechargeDB = "txkit_recharge_rc"
)

// Receiver is the account service's name at the recharge service: in its notifications, in the
// signed headers, and in its queries.
const Receiver = "account"

// SecretEnv names the environment variable holding the HMAC key the two services share (at
// least 16 bytes), unless -secret-file names a file holding it. There is no default: a service
// started without either exits, and the demo generates a random key for each run. Neither is a
// flag holding the key itself, so that it does not show in the process list; a real deployment
// takes it from a secret store.
const SecretEnv = "TXKIT_RECHARGE_SECRET"

// Secret returns the shared secret: the content of file (surrounding white space trimmed) when
// file is not empty, else $TXKIT_RECHARGE_SECRET; or an error saying how to set it.
func Secret(file string) (string, error) {
	s, from := os.Getenv(SecretEnv), "$"+SecretEnv
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("-secret-file: %w", err)
		}
		s, from = strings.TrimSpace(string(b)), file
	}
	if len(s) < 16 {
		return "", fmt.Errorf("no shared secret: %s holds %d bytes; set %s (or -secret-file) to a secret of at least 16 bytes shared by both services, e.g. export %s=$(openssl rand -hex 16)",
			from, len(s), SecretEnv, SecretEnv)
	}
	return s, nil
}

// PlainHTTP reports whether rawURL may be plain http://: only on the loopback interface, where
// the demo and a session by hand run both services. Anywhere else the services speak https://.
func PlainHTTP(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

// Recharge is the body of the recharge service's POST /recharges, and of the account service's
// POST /topups (where Order is optional).
type Recharge struct {
	Order   string `json:"order"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// Result is the payload of a notification: what became of a recharge.
type Result struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
	Status  string `json:"status"` // "succeeded"
}

// Answer is the body of the answers to POST /recharges and POST /topups.
type Answer struct {
	Order        string `json:"order,omitempty"`
	Status       string `json:"status"` // recharged, asked, rejected, failed
	Notification string `json:"notification,omitempty"`
	Error        string `json:"error,omitempty"`
}

// Attempt is one delivery attempt as the recharge service's GET /notifications/{order}/attempts
// shows it.
type Attempt struct {
	N          int     `json:"n"`
	StatusCode int     `json:"status_code"` // 0: no answer
	LatencyMS  float64 `json:"latency_ms"`
	Error      string  `json:"error,omitempty"`
}

// Delivery is the answer to GET /notifications/{order}/attempts: the notification's state at the
// recharge service and every attempt to deliver it.
type Delivery struct {
	Order    string    `json:"order"`
	ID       string    `json:"id"`
	Status   string    `json:"status"` // pending, delivered, failed
	Attempts []Attempt `json:"attempts"`
}

// Totals is the answer to the recharge service's GET /recharges.
type Totals struct {
	Count  int   `json:"count"`
	Amount int64 `json:"amount"`
}

// Order is one top-up as the account service keeps it (GET /orders).
type Order struct {
	ID       string    `json:"id"`
	Account  string    `json:"account"`
	Amount   int64     `json:"amount"`
	Status   string    `json:"status"`  // pending (asked, no result yet), credited, failed
	Credits  int       `json:"credits"` // times its amount was added to the balance: 1 when credited
	Via      []string  `json:"via"`     // per credit: "notification" or "reconcile"
	AskedAt  time.Time `json:"asked_at"`
	Credited *float64  `json:"credited_after_s,omitempty"` // seconds from asking to the credit
}

// Reconciled is the answer to the account service's POST /reconcile.
type Reconciled struct {
	Asked    []string `json:"asked"`    // orders asked about
	Credited int      `json:"credited"` // of them, credited now
	Pending  []string `json:"pending"`  // orders still pending afterwards
	Error    string   `json:"error,omitempty"`
}
