package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/inbox"
)

// NewInbox refuses a window whose double reaches the store's retention: a timestamp may lie up
// to the window ahead, so a replay stays possible until receipt + 2 × window, and the nonce must
// be remembered that long.
func TestNewInboxWindowAgainstRetention(t *testing.T) {
	apply := func(context.Context, pgx.Tx, notify.Delivery) error { return nil }
	secret := strings.Repeat("k", 16)
	for _, tc := range []struct {
		name    string
		retain  time.Duration
		window  time.Duration
		wantErr bool
	}{
		{name: "defaults", retain: 7 * 24 * time.Hour, window: notify.DefaultWindow},
		{name: "twice the window below the retention", retain: time.Hour, window: 29 * time.Minute},
		{name: "twice the window equals the retention", retain: time.Hour, window: 30 * time.Minute, wantErr: true},
		{name: "window below the retention, twice it above", retain: time.Hour, window: 45 * time.Minute, wantErr: true},
		{name: "window beyond the retention", retain: time.Minute, window: notify.DefaultWindow, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &pgxpool.Pool{} // NewInbox and idempotency.New do not touch the database
			store, err := idempotency.New(pool, idempotency.WithRetention(tc.retain, "@every 1m"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = inbox.New(pool, store, "shop", []string{secret}, apply, inbox.WindowForTest(tc.window))
			switch {
			case tc.wantErr && !errors.Is(err, notify.ErrInvalidOption):
				t.Fatalf("NewInbox(window %v, retention %v) = %v; want an error wrapping ErrInvalidOption", tc.window, tc.retain, err)
			case tc.wantErr && !strings.Contains(err.Error(), "retention"):
				t.Fatalf("error %q does not name the retention", err)
			case !tc.wantErr && err != nil:
				t.Fatalf("NewInbox(window %v, retention %v): %v", tc.window, tc.retain, err)
			}
		})
	}
}
