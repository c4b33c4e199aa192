package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// TxFilter selects global transactions for [Admin.Transactions]. Zero fields select everything.
type TxFilter struct {
	Kind       string        // "tcc", "saga", "2pc", "3pc" or "workflow"
	Status     string        // a status name: trying, voting, confirming, confirmed, cancelling, cancelled, running, compensating, compensated, succeeded, stopped
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
	Log       string `json:"log"`                // the LogSource it was read from
	Kind      string `json:"kind"`               // tcc, saga, 2pc, 3pc, workflow
	Workflow  string `json:"workflow,omitempty"` // a workflow's registered name
	Status    string `json:"status"`             // a workflow "stopped" waits for an operator ([Admin.Resume]); LastError says why
	Final     bool   `json:"final"`              // nothing more will happen to it
	Attempts  int    `json:"attempts"`           // failed drives since its last status change
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
	NextRetryAt time.Time `json:"next_retry_at,omitzero"` // zero (left out) once the transaction is final or stopped
	// SleepingUntil is when the durable sleep a running workflow is in ends (zero otherwise);
	// filled by [Admin.Transaction] only.
	SleepingUntil time.Time `json:"sleeping_until,omitzero"`
	Branches      []Branch  `json:"branches,omitempty"`
}

// The causes of [Transaction.AbortCause].
const (
	CauseRefused = core.CauseRefused
	CauseTimeout = core.CauseTimeout
)

// Branch is one participant's part of a [Transaction], in registration (saga) order. A
// workflow's branches are its steps in the function's order: a participant call; a local step
// (target_kind local, target "step"), whose Payload is its recorded result and Refusal its
// recorded error; a sleep (target "sleep"); and "$result" (target "result"), the workflow's
// output, or in Refusal why it rolled back.
type Branch struct {
	Name       string `json:"name"`
	Seq        int    `json:"seq"`
	Status     string `json:"status"`      // pending, confirmed, cancelled, succeeded, compensated
	TargetKind string `json:"target_kind"` // http, inproc, grpc, or local (a workflow's own record)
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
			return cf, fmt.Errorf("admin: kind %q: want tcc, saga, 2pc, 3pc or workflow: %w", f.Kind, ErrBadRequest)
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

// checkGID refuses a gid no log can hold.
func checkGID(gid string) error {
	if !pgutil.IsText(gid) {
		return fmt.Errorf("admin: gid %q: not valid UTF-8 without NUL: %w", gid, ErrBadRequest)
	}
	return nil
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
			if t.Status == core.StatusRunning && b.Target.Kind == core.TargetLocal && b.Target.Ref == "sleep" && b.Status == core.BranchPending {
				tx.SleepingUntil = sleepEnd(b.Payload)
			}
		}
		return &tx, nil
	}
	return nil, fmt.Errorf("admin: transaction %q: %w", gid, ErrNotFound)
}

func fromCore(log string, t *core.Transaction, reveal bool) Transaction {
	tx := Transaction{GID: t.GID, Log: log, Kind: t.Kind.String(), Status: t.Status.String(), Final: t.Status.Final(),
		Attempts: t.Attempts, LastError: t.LastError, Payload: optSecret(t.Payload, reveal), CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		TimeoutAt: t.TimeoutAt, NextRetryAt: t.NextRetryAt}
	if tx.Final || t.Status == core.StatusStopped {
		tx.NextRetryAt = time.Time{} // nothing is retried any more (a stopped workflow: until resumed)
	}
	if aborted(t.Status) {
		tx.AbortCause = t.AbortCause
	}
	if t.Kind == core.KindWorkflow {
		var rec struct{ Name string }
		if json.Unmarshal(t.Payload, &rec) == nil && pgutil.IsText(rec.Name) {
			tx.Workflow = rec.Name
		}
	}
	return tx
}

// sleepEnd is the end of a workflow's sleep from its record ({"until": unix ms}), zero when
// unreadable.
func sleepEnd(payload []byte) time.Time {
	var s struct{ Until int64 }
	if json.Unmarshal(payload, &s) != nil || s.Until <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(s.Until).UTC()
}

// Resume makes the stopped workflow gid (a replay diverged from its log) running again and due
// to its coordinator's leader now, on behalf of actor, and records the call in the audit table
// (action [ActionResume]). The leader replays it with the code deployed then: resume once that
// code agrees with the steps recorded. A workflow past its deadline then rolls back. A gid in no
// log returns an error wrapping [ErrNotFound]; one that is not a stopped workflow [ErrConflict].
func (a *Admin) Resume(ctx context.Context, actor, gid string) error {
	_, err := a.mutate(ctx, call{actor: actor, action: ActionResume, target: gid}, func(ctx context.Context) error {
		return a.resume(ctx, gid)
	})
	return err
}

func (a *Admin) resume(ctx context.Context, gid string) error {
	if err := checkGID(gid); err != nil {
		return err
	}
	for _, l := range a.logs {
		t, err := l.log.Get(ctx, gid)
		if missing(err) || errors.Is(err, core.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("admin: resume %s: %w", gid, err)
		}
		if t.Kind != core.KindWorkflow || t.Status != core.StatusStopped {
			return fmt.Errorf("admin: resume: %s is a %s %s, not a stopped workflow: %w", gid, t.Kind, t.Status, ErrConflict)
		}
		err = l.log.Park(ctx, lock.Token{}, gid, core.StatusStopped, core.StatusRunning, 0, "")
		if errors.Is(err, core.ErrInvalidState) {
			return fmt.Errorf("admin: resume %s: no longer stopped: %w", gid, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("admin: resume %s: %w", gid, err)
		}
		return nil
	}
	return fmt.Errorf("admin: resume: workflow %q: %w", gid, ErrNotFound)
}

// aborted reports whether s is a final status of a transaction that did not commit.
func aborted(s core.Status) bool {
	return s == core.StatusCancelled || s == core.StatusCompensated
}
