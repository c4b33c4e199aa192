package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/notify"
)

// Notification is a notification as the sender keeps it; Tries is filled by
// [Admin.Notification] only.
type Notification struct {
	ID             uuid.UUID  `json:"id"`
	Receiver       string     `json:"receiver"`
	Key            string     `json:"key"`
	Payload        Secret     `json:"payload"`  // redacted but by RevealNotification
	Status         string     `json:"status"`   // pending, delivered, failed
	Attempts       int        `json:"attempts"` // of the current schedule
	NextAttemptAt  time.Time  `json:"next_attempt_at"`
	LastStatusCode int        `json:"last_status_code"` // HTTP status of the last attempt; 0: no answer
	LastError      string     `json:"last_error,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	DeliveredAt    *time.Time `json:"delivered_at,omitempty"`
	Tries          []Attempt  `json:"tries,omitempty"`
}

// Attempt is one delivery attempt of a [Notification].
type Attempt struct {
	N          int           `json:"n"` // 1 for the first; redeliveries go on counting
	At         time.Time     `json:"at"`
	StatusCode int           `json:"status_code"` // 0: no answer
	Latency    time.Duration `json:"latency_ns"`
	Error      string        `json:"error,omitempty"`
}

func fromRecord(r *notify.Record, reveal bool) Notification {
	return Notification{ID: r.ID, Receiver: r.Receiver, Key: r.Key, Payload: secret(r.Payload, reveal), Status: r.Status.String(),
		Attempts: r.Attempts, NextAttemptAt: r.NextAttemptAt, LastStatusCode: r.LastStatusCode, LastError: r.LastError,
		CreatedAt: r.CreatedAt, DeliveredAt: r.DeliveredAt}
}

// FailedNotifications returns up to limit (1..[MaxLimit]) notifications that ran out of attempts,
// oldest first. A limit out of range returns an error wrapping [ErrBadRequest]. One query.
func (a *Admin) FailedNotifications(ctx context.Context, limit int) ([]Notification, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	rs, err := a.nt.ListFailed(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("admin: failed notifications: %w", err)
	}
	out := make([]Notification, 0, len(rs))
	for _, r := range rs {
		out = append(out, fromRecord(r, false))
	}
	return out, nil
}

// Notification returns the notification id with its attempts, or an error wrapping
// [ErrNotFound]. The payload is redacted ([Secret]). Two queries.
func (a *Admin) Notification(ctx context.Context, id uuid.UUID) (*Notification, error) {
	return a.notification(ctx, id, false)
}

func (a *Admin) notification(ctx context.Context, id uuid.UUID, reveal bool) (*Notification, error) {
	r, err := a.nt.Get(ctx, id)
	if errors.Is(err, notify.ErrNotFound) {
		return nil, fmt.Errorf("admin: notification %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("admin: notification %s: %w", id, err)
	}
	as, err := a.nt.Attempts(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("admin: notification %s: %w", id, err)
	}
	n := fromRecord(r, reveal)
	n.Tries = make([]Attempt, 0, len(as))
	for _, x := range as {
		n.Tries = append(n.Tries, Attempt{N: x.N, At: x.At, StatusCode: x.StatusCode, Latency: x.Latency, Error: x.Error})
	}
	return &n, nil
}

// Redeliver puts the failed notification id back on its schedule from the start
// (notify.Notifier.Redeliver) on behalf of actor, and records the call in the audit table. One
// that has not failed returns an error wrapping [ErrConflict] ("it is pending, not failed"); an
// unknown id one wrapping [ErrNotFound].
func (a *Admin) Redeliver(ctx context.Context, actor string, id uuid.UUID) error {
	_, err := a.mutate(ctx, call{actor: actor, action: ActionRedeliver, target: id.String()}, func(ctx context.Context) error {
		return a.redeliver(ctx, id)
	})
	return err
}

func (a *Admin) redeliver(ctx context.Context, id uuid.UUID) error {
	err := a.nt.Redeliver(ctx, id)
	switch {
	case errors.Is(err, notify.ErrNotFound):
		return fmt.Errorf("admin: redeliver: notification %s: %w", id, ErrNotFound)
	case errors.Is(err, notify.ErrInvalidOption):
		status := "not failed"
		if r, gerr := a.nt.Get(ctx, id); gerr == nil {
			status = r.Status.String()
		}
		return fmt.Errorf("admin: redeliver: notification %s is %s, not failed: %w", id, status, ErrConflict)
	case err != nil:
		return fmt.Errorf("admin: redeliver %s: %w", id, err)
	}
	return nil
}
