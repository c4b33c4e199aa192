package console

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Option configures [Handler].
type Option func(*options)

type options struct {
	refresh time.Duration
	title   string
	log     *slog.Logger
}

func defaultOptions() options {
	return options{refresh: 5 * time.Second, title: "txkit console", log: slog.New(slog.DiscardHandler)}
}

// WithRefresh sets how often a page reloads itself (a small timer in the page's script, which the
// operator can switch off and which waits while an action is under way); 0 turns it off. Default
// 5 s; a value between 0 and 1 s, or below 0, is refused.
func WithRefresh(d time.Duration) Option { return func(o *options) { o.refresh = d } }

// WithTitle sets the name shown in every page's header and title. Default "txkit console".
func WithTitle(s string) Option { return func(o *options) { o.title = s } }

// WithLogger sets the logger for the errors a page hides from the browser (logged with the request
// id the page shows). Default: discard.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

func (o options) validate() error {
	if o.refresh < 0 || (o.refresh > 0 && o.refresh < time.Second) {
		return fmt.Errorf("console: refresh %v: must be 0 (off) or at least 1s: %w", o.refresh, ErrInvalidOption)
	}
	if strings.TrimSpace(o.title) == "" || len(o.title) > 200 {
		return fmt.Errorf("console: title %q: must be 1 to 200 characters: %w", o.title, ErrInvalidOption)
	}
	if o.log == nil {
		return fmt.Errorf("console: nil logger: %w", ErrInvalidOption)
	}
	return nil
}
