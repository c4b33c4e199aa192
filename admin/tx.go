package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/pgutil"
)

// TxFilter selects global transactions for [Admin.Transactions]. Zero fields select everything.
type TxFilter struct {
	Kind       string        // "tcc", "saga", "2pc" or "3pc"
	Status     string        // a status name: trying, voting, confirming, confirmed, cancelling, cancelled, running, compensating, compensated, succeeded
	Unfinished bool          // only transactions not in a final status
	OlderThan  time.Duration // only transactions created longer ago than this (PostgreSQL's clock)
	After      string        // the cursor: gids after this one ([TxPage.Next] of the page before)
	Limit      int           // 1..[MaxLimit]; 0 means [DefaultLimit]
}

// Page sizes of the list calls.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// TxPage is one page of [Admin.Transactions]: Items in gid order, and Next, the cursor of the
// following page ("" when this page is the last).
type TxPage struct {
	Items []Transaction `json:"items"`
	Next  string        `json:"next,omitempty"`
}

// Transaction is a global transaction. Branches is filled by [Admin.Transaction] only.
type Transaction struct {
	GID       string `json:"gid"`
	Log       string `json:"log"`  // the LogSource it was read from
	Kind      string `json:"kind"` // tcc, saga, 2pc, 3pc
	Status    string `json:"status"`
	Final     bool   `json:"final"`    // nothing more will happen to it
	Attempts  int    `json:"attempts"` // failed drives since its last status change
	LastError string `json:"last_error,omitempty"`
	// AbortCause says why a transaction that did not commit rolled back, when the log knows:
	// [CauseRefused] (a participant refused: its branch's Refusal says why) or [CauseTimeout]
	// (cancelled at its timeout, a starter gone); "" otherwise (rolled back by its starter, after
	// a failure or by choice) and for transactions still running or committed.
	AbortCause  string    `json:"abort_cause,omitempty"`
	Payload     *Secret   `json:"payload,omitempty"` // redacted but by RevealTransaction
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	TimeoutAt   time.Time `json:"timeout_at"`
	NextRetryAt time.Time `json:"next_retry_at,omitzero"` // zero (left out) once the transaction is final
	Branches    []Branch  `json:"branches,omitempty"`
}

// The causes of [Transaction.AbortCause].
const (
	CauseRefused = core.CauseRefused
	CauseTimeout = core.CauseTimeout
)

// Branch is one participant's part of a [Transaction], in registration (saga) order.
type Branch struct {
	Name       string `json:"name"`
	Seq        int    `json:"seq"`
	Status     string `json:"status"`      // pending, confirmed, cancelled, succeeded, compensated
	TargetKind string `json:"target_kind"` // http, inproc or grpc
	Target     string `json:"target"`      // the URL (without its password) or the registered participant's name (inproc, grpc)
	Attempts   int    `json:"attempts"`    // failed calls of the branch
	LastError  string `json:"last_error,omitempty"`
	// Refusal is why the participant refused the branch (the refusal's text, at most 2000
	// bytes), "" when it did not.
	Refusal   string    `json:"refusal,omitempty"`
	Payload   *Secret   `json:"payload,omitempty"` // what the participant is sent; redacted but by RevealTransaction
	UpdatedAt time.Time `json:"updated_at"`        // when its status, attempts or last error last changed
	// Header is what an HTTP branch sends with every call (participant.HTTP.Header), each value
	// redacted but by RevealTransaction; TimeoutMS its own call timeout (0: the coordinator's).
	Header    map[string][]Secret `json:"header,omitempty"`
	TimeoutMS int64               `json:"timeout_ms,omitempty"`
}

// Check returns nil when [Admin.Transactions] accepts f, or an error wrapping [ErrBadRequest] that
// says which field is wrong and what it may be. It does not block.
func (f TxFilter) Check() error {
	_, err := checkFilter(f)
	return err
}

// checkFilter turns f into core's filter, or an error wrapping ErrBadRequest.
func checkFilter(f TxFilter) (core.Filter, error) {
	cf := core.Filter{After: f.After, Unfinished: f.Unfinished, Limit: f.Limit, OlderThan: f.OlderThan}
	if !pgutil.IsText(f.After) {
		return cf, fmt.Errorf("admin: after %q: not a gid (valid UTF-8 without NUL): %w", f.After, ErrBadRequest)
	}
	if f.Kind != "" {
		k, err := core.ParseKind(f.Kind)
		if err != nil {
			return cf, fmt.Errorf("admin: kind %q: want tcc, saga, 2pc or 3pc: %w", f.Kind, ErrBadRequest)
		}
		cf.Kind = k
	}
	if f.Status != "" {
		s, err := core.ParseStatus(f.Status)
		if err != nil {
			return cf, fmt.Errorf("admin: status %q: want one of %s: %w", f.Status, statusNames(), ErrBadRequest)
		}
		cf.Status = s
	}
	if f.OlderThan < 0 {
		return cf, fmt.Errorf("admin: older than %v: must not be negative: %w", f.OlderThan, ErrBadRequest)
	}
	if cf.Limit == 0 {
		cf.Limit = DefaultLimit
	}
	if err := checkLimit(cf.Limit); err != nil {
		return cf, err
	}
	return cf, nil
}

func checkLimit(n int) error {
	if n < 1 || n > MaxLimit {
		return fmt.Errorf("admin: limit %d: must be 1..%d: %w", n, MaxLimit, ErrBadRequest)
	}
	return nil
}

func statusNames() string {
	var s string
	for st := core.Status(1); st.String() != fmt.Sprintf("Status(%d)", st); st++ {
		if s != "" {
			s += ", "
		}
		s += st.String()
	}
	return s
}

// Transactions returns the page of global transactions f selects, from every log, merged in gid
// order. A filter out of range returns an error wrapping [ErrBadRequest] that says what is wrong.
// A log whose tables do not exist is skipped. It blocks for one query per log; ctx scopes the call.
func (a *Admin) Transactions(ctx context.Context, f TxFilter) (TxPage, error) {
	cf, err := checkFilter(f)
	if err != nil {
		return TxPage{}, err
	}
	var all []Transaction
	for _, l := range a.logs {
		txs, err := l.log.List(ctx, cf)
		if missing(err) {
			continue
		}
		if err != nil {
			return TxPage{}, fmt.Errorf("admin: transactions of log %s: %w", l.src.Name, err)
		}
		for _, t := range txs {
			all = append(all, fromCore(l.src.Name, t, false))
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].GID < all[j].GID })
	p := TxPage{Items: all}
	if len(all) > cf.Limit {
		p.Items = all[:cf.Limit]
	}
	if len(all) >= cf.Limit && len(p.Items) > 0 {
		p.Next = p.Items[len(p.Items)-1].GID
	}
	if p.Items == nil {
		p.Items = []Transaction{}
	}
	return p, nil
}

// Transaction returns the global transaction gid with its branches, from the first log that has
// it, or an error wrapping [ErrNotFound]. Payloads are redacted ([Secret]). It blocks for two
// queries per log searched.
func (a *Admin) Transaction(ctx context.Context, gid string) (*Transaction, error) {
	return a.transaction(ctx, gid, false)
}

func (a *Admin) transaction(ctx context.Context, gid string, reveal bool) (*Transaction, error) {
	for _, l := range a.logs {
		t, err := l.log.Get(ctx, gid)
		if missing(err) || errors.Is(err, core.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("admin: transaction %s: %w", gid, err)
		}
		tx := fromCore(l.src.Name, t, reveal)
		tx.Branches = make([]Branch, 0, len(t.Branches))
		for _, b := range t.Branches {
			kind := b.Target.Kind.String()
			tx.Branches = append(tx.Branches, Branch{Name: b.Name, Seq: b.Seq, Status: b.Status.String(), TargetKind: kind,
				Target: targetRef(kind, b.Target.Ref), Attempts: b.Attempts, LastError: b.LastError, Refusal: b.Refusal,
				Payload: optSecret(b.Payload, reveal), UpdatedAt: b.UpdatedAt,
				Header: headerSecrets(b.Target.Header, reveal), TimeoutMS: b.Target.Timeout.Milliseconds()})
		}
		return &tx, nil
	}
	return nil, fmt.Errorf("admin: transaction %q: %w", gid, ErrNotFound)
}

func fromCore(log string, t *core.Transaction, reveal bool) Transaction {
	tx := Transaction{GID: t.GID, Log: log, Kind: t.Kind.String(), Status: t.Status.String(), Final: t.Status.Final(),
		Attempts: t.Attempts, LastError: t.LastError, Payload: optSecret(t.Payload, reveal), CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		TimeoutAt: t.TimeoutAt, NextRetryAt: t.NextRetryAt}
	if tx.Final {
		tx.NextRetryAt = time.Time{} // nothing is retried any more
	}
	if aborted(t.Status) {
		tx.AbortCause = t.AbortCause
	}
	return tx
}

// aborted reports whether s is a final status of a transaction that did not commit.
func aborted(s core.Status) bool {
	return s == core.StatusCancelled || s == core.StatusCompensated
}
